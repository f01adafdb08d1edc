#include "k8s/client/protobuf_value.h"

#include <functional>

#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "k8s/client/protobuf_wire.h"
#include "k8s_core.pb.h"

namespace tessera::k8s {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;
namespace pb = ::tessera::k8s::wire;
namespace gp = ::google::protobuf;

std::string Envelope(const std::string& kind, const std::string& raw) {
  pb::Unknown u;
  u.mutable_typemeta()->set_apiversion("v1");
  u.mutable_typemeta()->set_kind(kind);
  u.set_raw(raw);
  return std::string("k8s\0", 4) + u.SerializeAsString();
}

// Sets every field of `m` and of its messages (through the .proto's descriptors, so that a field
// added to the .proto is covered without touching this test): strings with a byte that is not
// UTF-8 in some, numbers, booleans, two elements of every repeated field, two entries of every
// map.
void FillEverything(gp::Message* m, int* counter, int depth = 0) {
  const gp::Descriptor* d = m->GetDescriptor();
  const gp::Reflection* r = m->GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const gp::FieldDescriptor* f = d->field(i);
    const int n = ++*counter;
    const std::string text = n % 3 == 0 ? StrCat("v\xff", n) : StrCat("value-", n);
    auto fill = [&](int k) {
      switch (f->cpp_type()) {
        case gp::FieldDescriptor::CPPTYPE_STRING:
          if (f->is_repeated()) {
            r->AddString(m, f, StrCat(text, "-", k));
          } else {
            r->SetString(m, f, text);
          }
          break;
        case gp::FieldDescriptor::CPPTYPE_INT32:
          if (f->is_repeated()) return;
          r->SetInt32(m, f, -n);
          break;
        case gp::FieldDescriptor::CPPTYPE_INT64:
          if (f->is_repeated()) return;
          r->SetInt64(m, f, int64_t{1772359200} + n);
          break;
        case gp::FieldDescriptor::CPPTYPE_BOOL:
          if (f->is_repeated()) return;
          r->SetBool(m, f, n % 2 == 0);
          break;
        case gp::FieldDescriptor::CPPTYPE_MESSAGE: {
          if (depth > 12) return;
          gp::Message* sub = f->is_repeated() ? r->AddMessage(m, f) : r->MutableMessage(m, f);
          if (f->is_map()) {
            // key, value: keys differ per entry.
            const gp::FieldDescriptor* key = sub->GetDescriptor()->field(0);
            const gp::FieldDescriptor* value = sub->GetDescriptor()->field(1);
            sub->GetReflection()->SetString(sub, key, StrCat(k == 0 ? "b-" : "a-", text));
            if (value->cpp_type() == gp::FieldDescriptor::CPPTYPE_STRING) {
              sub->GetReflection()->SetString(sub, value, StrCat(text, "-", k));
            } else {
              gp::Message* q = sub->GetReflection()->MutableMessage(sub, value);
              FillEverything(q, counter, depth + 1);
            }
          } else {
            FillEverything(sub, counter, depth + 1);
          }
          break;
        }
        default:
          break;
      }
    };
    fill(0);
    if (f->is_repeated()) fill(1);
  }
}

// The items of a list answer read in place, as JSON; and ProtobufListToJson's.
struct BothReadings {
  absl::Status in_place_status;
  absl::Status json_status;
  json in_place = json::array();
  json from_json = json::array();
  std::string continue_token, resource_version;
  bool ambiguous = false;
};

BothReadings Read(const std::string& body) {
  BothReadings out;
  absl::StatusOr<ProtobufList> list = ReadProtobufList(std::make_shared<const std::string>(body));
  out.in_place_status = list.status();
  if (list.ok()) {
    for (const ProtobufValue& item : list->items) {
      out.in_place.push_back(ProtobufValueToJson(item, &out.ambiguous));
    }
    out.continue_token = list->continue_token;
    out.resource_version = list->resource_version;
  }
  absl::StatusOr<json> j = ProtobufListToJson(body);
  out.json_status = j.status();
  if (j.ok()) out.from_json = (*j)["items"];
  return out;
}

TEST(ProtobufValue, EveryFieldOfAPodListReadsAsProtobufListToJsonWritesIt) {
  pb::PodList list;
  int counter = 0;
  FillEverything(&list, &counter);
  list.mutable_metadata()->set_continue_("next");
  const std::string body = Envelope("PodList", list.SerializeAsString());
  BothReadings r = Read(body);
  ASSERT_TRUE(r.in_place_status.ok()) << r.in_place_status;
  ASSERT_TRUE(r.json_status.ok()) << r.json_status;
  ASSERT_EQ(r.in_place.size(), 2u);
  EXPECT_EQ(r.in_place, r.from_json);
  EXPECT_FALSE(r.ambiguous);
  EXPECT_EQ(r.continue_token, "next");
  EXPECT_EQ(r.resource_version, list.metadata().resourceversion().substr(0, 1) == "v"
                                    ? ValidUtf8(list.metadata().resourceversion())
                                    : list.metadata().resourceversion());
  // Strings that are not UTF-8 read with U+FFFD, as on the JSON wire.
  EXPECT_THAT(r.in_place.dump(), HasSubstr("v\xEF\xBF\xBD"));
  EXPECT_EQ(r.in_place.dump().find("v\xff"), std::string::npos);
}

TEST(ProtobufValue, EveryFieldOfANodeListReadsAsProtobufListToJsonWritesIt) {
  pb::NodeList list;
  int counter = 0;
  FillEverything(&list, &counter);
  BothReadings r = Read(Envelope("NodeList", list.SerializeAsString()));
  ASSERT_TRUE(r.in_place_status.ok()) << r.in_place_status;
  ASSERT_TRUE(r.json_status.ok()) << r.json_status;
  ASSERT_EQ(r.in_place.size(), 2u);
  EXPECT_EQ(r.in_place, r.from_json);
}

TEST(ProtobufValue, AbsentFieldsReadAsTheJsonShapeHasThem) {
  pb::PodList list;
  list.add_items();  // nothing at all
  pb::Pod* p = list.add_items();
  p->mutable_spec()
      ->mutable_affinity()
      ->mutable_nodeaffinity()
      ->mutable_requiredduringschedulingignoredduringexecution();
  p->mutable_status()->add_conditions();  // no type, no status
  BothReadings r = Read(Envelope("PodList", list.SerializeAsString()));
  ASSERT_TRUE(r.in_place_status.ok()) << r.in_place_status;
  EXPECT_EQ(r.in_place, r.from_json);
  EXPECT_EQ(r.in_place[0], json::parse(R"({"metadata":{},"spec":{"containers":[]},"status":{}})"));
}

// A message sent twice merges (the last scalar wins, repeated fields add up, maps take the
// last value of a key), fields the .proto does not declare are skipped (groups included), as
// libprotobuf does.
TEST(ProtobufValue, MergedMessagesAndUnknownFieldsReadAsLibprotobufParsesThem) {
  pb::Pod a, b;
  a.mutable_metadata()->set_name("first");
  (*a.mutable_metadata()->mutable_labels())["k"] = "old";
  a.mutable_spec()->add_containers()->set_name("one");
  b.mutable_metadata()->set_name("second");
  (*b.mutable_metadata()->mutable_labels())["k"] = "new";
  b.mutable_spec()->add_containers()->set_name("two");
  b.mutable_spec()->set_priority(-5);
  std::string unknown;
  unknown += '\x98';  // field 99, varint
  unknown += '\x06';
  unknown += '\x7f';
  unknown += '\x93';  // field 98, start group
  unknown += '\x06';
  unknown += '\x08';  // field 1, varint 1 inside the group
  unknown += '\x01';
  unknown += '\x94';  // field 98, end group
  unknown += '\x06';
  const std::string pod = a.SerializeAsString() + unknown + b.SerializeAsString();
  pb::PodList list;
  ASSERT_TRUE(list.add_items()->ParseFromString(pod));
  std::string raw = "\x12" + std::string(1, static_cast<char>(pod.size())) + pod;
  ASSERT_LT(pod.size(), 128u);
  BothReadings r = Read(Envelope("PodList", raw));
  ASSERT_TRUE(r.in_place_status.ok()) << r.in_place_status;
  ASSERT_TRUE(r.json_status.ok()) << r.json_status;
  EXPECT_EQ(r.in_place, r.from_json);
  EXPECT_EQ(r.in_place[0]["metadata"]["name"], "second");
  EXPECT_EQ(r.in_place[0]["metadata"]["labels"]["k"], "new");
  EXPECT_EQ(r.in_place[0]["spec"]["containers"].size(), 2u);
  EXPECT_EQ(r.in_place[0]["spec"]["priority"], -5);
}

// What libprotobuf refuses is refused, with the same message; what it reads is read.
TEST(ProtobufValue, PagesLibprotobufRefusesAreRefused) {
  pb::PodList list;
  list.add_items()->mutable_metadata()->set_name("p");
  const std::string raw = list.SerializeAsString();
  for (size_t cut = 1; cut < raw.size(); ++cut) {
    const std::string body = Envelope("PodList", raw.substr(0, cut));
    BothReadings r = Read(body);
    EXPECT_EQ(r.in_place_status.ok(), r.json_status.ok()) << cut;
    if (!r.json_status.ok()) {
      EXPECT_EQ(r.in_place_status, r.json_status) << cut;
    }
  }
  for (const std::string& bad : {std::string("\x0b", 1),         // a group that never ends
                                 std::string("\x0c", 1),         // an end of group alone
                                 std::string("\x00\x01", 2),     // field number 0
                                 std::string("\x0f\x01", 2)}) {  // wire type 7
    BothReadings r = Read(Envelope("PodList", raw + bad));
    EXPECT_FALSE(r.in_place_status.ok());
    EXPECT_FALSE(r.json_status.ok());
    EXPECT_EQ(r.in_place_status, r.json_status);
  }
  EXPECT_THAT(
      ReadProtobufList(std::make_shared<const std::string>(Envelope("Pod", ""))).status().message(),
      HasSubstr("a protobuf Pod where a PodList or NodeList was expected"));
  EXPECT_THAT(ReadProtobufList(std::make_shared<const std::string>("{}")).status().message(),
              HasSubstr("no k8s\\0"));
}

TEST(ProtobufValue, AnswersTheQuestionsOfTheJsonDecoders) {
  pb::Pod p;
  (*p.mutable_metadata()->mutable_annotations())["tessera.dev/queue"] = "research";
  (*p.mutable_metadata()->mutable_annotations())["bad\xfekey"] = "x";
  p.mutable_spec()->set_priority(7);
  pb::OwnerReference* o = p.mutable_metadata()->add_ownerreferences();
  o->set_controller(true);
  const std::string bytes = p.SerializeAsString();
  ASSERT_TRUE(ProtobufPodParses(bytes));
  const ProtobufValue pod = ProtobufValue::Pod(bytes);
  const ProtobufValue annotations = JsonField(JsonField(pod, "metadata"), "annotations");
  EXPECT_TRUE(annotations.is_object());
  EXPECT_EQ(JsonStringField(annotations, "tessera.dev/queue"), "research");
  EXPECT_TRUE(JsonField(annotations, "nothing").is_null());
  EXPECT_EQ(JsonStringField(annotations, "bad\xEF\xBF\xBDkey"), "x");
  EXPECT_EQ(annotations.items().size(), 2u);
  EXPECT_EQ(JsonField(JsonField(pod, "spec"), "priority").get<int32_t>(), 7);
  EXPECT_TRUE(JsonField(JsonField(pod, "spec"), "nodeName").is_null());
  EXPECT_TRUE(JsonField(JsonField(pod, "metadata"), "ownerReferences")[0].Field("controller") ==
              true);
  EXPECT_TRUE(JsonField(pod, "spec").Field("containers").is_array());
  EXPECT_TRUE(JsonField(pod, "spec").Field("containers").empty());
}

}  // namespace
}  // namespace tessera::k8s
