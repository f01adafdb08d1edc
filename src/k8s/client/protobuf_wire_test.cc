#include "k8s/client/protobuf_wire.h"

#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "k8s_core.pb.h"

namespace tessera::k8s {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;
namespace pb = ::tessera::k8s::wire;

std::string Envelope(const std::string& kind, const std::string& raw) {
  pb::Unknown u;
  u.mutable_typemeta()->set_apiversion("v1");
  u.mutable_typemeta()->set_kind(kind);
  u.set_raw(raw);
  u.set_contenttype("");
  return std::string("k8s\0", 4) + u.SerializeAsString();
}

// A pod with every field tessera reads comes out as the API server's JSON would have it.
TEST(ProtobufWire, APodListAsTheJsonTheApiServerWouldSend) {
  pb::PodList list;
  list.mutable_metadata()->set_resourceversion("123");
  list.mutable_metadata()->set_continue_("next-page");
  pb::Pod* p = list.add_items();
  pb::ObjectMeta* m = p->mutable_metadata();
  m->set_name("trainer-0");
  m->set_namespace_("team");
  m->set_uid("u-1");
  m->set_resourceversion("99");
  m->mutable_creationtimestamp()->set_seconds(1772359200);  // 2026-03-01T10:00:00Z
  (*m->mutable_labels())["app"] = "train";
  (*m->mutable_annotations())["tessera.dev/queue"] = "research";
  pb::OwnerReference* o = m->add_ownerreferences();
  o->set_apiversion("batch/v1");
  o->set_kind("Job");
  o->set_name("trainer");
  o->set_uid("j-1");
  o->set_controller(true);
  pb::PodSpec* s = p->mutable_spec();
  pb::Container* c = s->add_containers();
  c->set_name("main");
  (*c->mutable_resources()->mutable_limits())["tessera.dev/gpu"].set_string("1");
  (*c->mutable_resources()->mutable_requests())["cpu"].set_string("500m");
  pb::Container* init = s->add_initcontainers();
  init->set_name("sidecar");
  init->set_restartpolicy("Always");
  (*s->mutable_nodeselector())["pool"] = "a";
  s->set_schedulername("tessera");
  s->set_priority(100);
  s->set_preemptionpolicy("Never");
  s->set_activedeadlineseconds(900);
  pb::Toleration* t = s->add_tolerations();
  t->set_key("gpu");
  t->set_operator_("Exists");
  t->set_effect("NoSchedule");
  pb::NodeSelectorRequirement* r = s->mutable_affinity()
                                       ->mutable_nodeaffinity()
                                       ->mutable_requiredduringschedulingignoredduringexecution()
                                       ->add_nodeselectorterms()
                                       ->add_matchexpressions();
  r->set_key("zone");
  r->set_operator_("In");
  r->add_values("z1");
  s->add_schedulinggates()->set_name("kueue.x-k8s.io/admission");
  s->mutable_schedulinggroup()->set_podgroupname("train");
  (*s->mutable_overhead())["cpu"].set_string("100m");
  pb::PodResourceClaim* claim = s->add_resourceclaims();
  claim->set_name("gpu");
  claim->set_resourceclaimtemplatename("one-gpu");
  pb::PodStatus* st = p->mutable_status();
  st->set_phase("Pending");
  st->mutable_starttime()->set_seconds(1772359260);  // 2026-03-01T10:01:00Z
  pb::PodCondition* cond = st->add_conditions();
  cond->set_type("PodScheduled");
  cond->set_status("False");
  cond->set_message("0/3 nodes are available");
  pb::PodResourceClaimStatus* cs = st->add_resourceclaimstatuses();
  cs->set_name("gpu");
  cs->set_resourceclaimname("trainer-0-gpu-x");

  absl::StatusOr<json> got = ProtobufListToJson(Envelope("PodList", list.SerializeAsString()));
  ASSERT_TRUE(got.ok()) << got.status();
  const json want = json::parse(R"({
    "kind": "PodList", "apiVersion": "v1",
    "metadata": {"resourceVersion": "123", "continue": "next-page"},
    "items": [{
      "metadata": {"name": "trainer-0", "namespace": "team", "uid": "u-1", "resourceVersion": "99",
        "creationTimestamp": "2026-03-01T10:00:00Z", "labels": {"app": "train"},
        "annotations": {"tessera.dev/queue": "research"},
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "trainer",
                             "uid": "j-1", "controller": true}]},
      "spec": {
        "containers": [{"name": "main", "resources": {"limits": {"tessera.dev/gpu": "1"},
                                                       "requests": {"cpu": "500m"}}}],
        "initContainers": [{"name": "sidecar", "restartPolicy": "Always"}],
        "nodeSelector": {"pool": "a"},
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
          "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In",
                                                       "values": ["z1"]}]}]}}},
        "schedulerName": "tessera",
        "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "priority": 100,
        "preemptionPolicy": "Never",
        "activeDeadlineSeconds": 900,
        "overhead": {"cpu": "100m"},
        "schedulingGates": [{"name": "kueue.x-k8s.io/admission"}],
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
        "schedulingGroup": {"podGroupName": "train"}},
      "status": {"phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "False",
                        "message": "0/3 nodes are available"}],
        "startTime": "2026-03-01T10:01:00Z",
        "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "trainer-0-gpu-x"}]}
    }]})");
  EXPECT_EQ(*got, want) << got->dump(2);
}

TEST(ProtobufWire, ANodeListAndTheLastPage) {
  pb::NodeList list;
  list.mutable_metadata()->set_resourceversion("7");
  pb::Node* n = list.add_items();
  n->mutable_metadata()->set_name("gpu-a");
  (*n->mutable_metadata()->mutable_annotations())["tessera.dev/gpu-inventory"] = "{}";
  n->mutable_metadata()->mutable_deletiontimestamp()->set_seconds(0);
  n->mutable_spec()->set_unschedulable(true);
  pb::Taint* t = n->mutable_spec()->add_taints();
  t->set_key("nvidia.com/gpu");
  t->set_effect("NoSchedule");
  (*n->mutable_status()->mutable_allocatable())["tessera.dev/gpu"].set_string("8");
  (*n->mutable_status()->mutable_capacity())["cpu"].set_string("112");
  pb::NodeCondition* c = n->mutable_status()->add_conditions();
  c->set_type("Ready");
  c->set_status("True");
  absl::StatusOr<json> got = ProtobufListToJson(Envelope("NodeList", list.SerializeAsString()));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)["metadata"], json({{"resourceVersion", "7"}}));  // no continue: the last page
  const json want = json::parse(R"({
    "metadata": {"name": "gpu-a", "deletionTimestamp": "1970-01-01T00:00:00Z",
                 "annotations": {"tessera.dev/gpu-inventory": "{}"}},
    "spec": {"unschedulable": true, "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]},
    "status": {"capacity": {"cpu": "112"}, "allocatable": {"tessera.dev/gpu": "8"},
               "conditions": [{"type": "Ready", "status": "True"}]}})");
  EXPECT_EQ((*got)["items"][0], want) << got->dump(2);
}

TEST(ProtobufWire, WhatIsNotAListOfOursIsRefusedWithWhy) {
  EXPECT_THAT(ProtobufListToJson("{\"kind\":\"PodList\"}").status().message(),
              HasSubstr("not in Kubernetes' protobuf envelope"));
  EXPECT_THAT(ProtobufListToJson(std::string("k8s\0\xff\xff\xff", 7)).status().message(),
              HasSubstr("the protobuf envelope does not parse"));
  EXPECT_THAT(ProtobufListToJson(Envelope("Status", "")).status().message(),
              HasSubstr("a protobuf Status where a PodList or NodeList was expected"));
  EXPECT_THAT(ProtobufListToJson(Envelope("PodList", "\x12\x05\x0a")).status().message(),
              HasSubstr("a PodList does not parse"));
  pb::Unknown gz;
  gz.mutable_typemeta()->set_kind("PodList");
  gz.set_contentencoding("gzip");
  EXPECT_THAT(
      ProtobufListToJson(std::string("k8s\0", 4) + gz.SerializeAsString()).status().message(),
      HasSubstr("encoded (gzip)"));
  EXPECT_TRUE(IsProtobufEnvelope(Envelope("PodList", "")));
  EXPECT_FALSE(IsProtobufEnvelope("k8s"));
}

// The next page's token, read from the wire before the page is decoded.
TEST(ProtobufWire, TheContinueTokenIsPeekedWithoutDecodingTheItems) {
  pb::PodList list;
  list.mutable_metadata()->set_resourceversion("5");
  list.mutable_metadata()->set_continue_("tok-123");
  for (int i = 0; i < 3; ++i) list.add_items()->mutable_metadata()->set_name("p");
  EXPECT_EQ(PeekProtobufContinue(Envelope("PodList", list.SerializeAsString())), "tok-123");
  list.mutable_metadata()->clear_continue_();
  EXPECT_EQ(PeekProtobufContinue(Envelope("PodList", list.SerializeAsString())), "");
  pb::NodeList nodes;  // no metadata at all: not read this way
  nodes.add_items()->mutable_metadata()->set_name("n");
  EXPECT_EQ(PeekProtobufContinue(Envelope("NodeList", nodes.SerializeAsString())), std::nullopt);
  EXPECT_EQ(PeekProtobufContinue("{\"metadata\":{}}"), std::nullopt);
  const std::string cut = Envelope("PodList", list.SerializeAsString());
  for (size_t n = 4; n < cut.size(); ++n) (void)PeekProtobufContinue(cut.substr(0, n));  // no crash
}

// An error in protobuf becomes the JSON Status the API server would have sent.
TEST(ProtobufWire, AnErrorStatusReadsAsJson) {
  pb::Status st;
  st.set_status("Failure");
  st.set_message("The provided continue parameter is too old");
  st.set_reason("Expired");
  st.set_code(410);
  const std::optional<std::string> j =
      ProtobufStatusAsJson(Envelope("Status", st.SerializeAsString()));
  ASSERT_TRUE(j.has_value());
  const json got = json::parse(*j);
  EXPECT_EQ(got["reason"], "Expired");
  EXPECT_EQ(got["code"], 410);
  EXPECT_EQ(got["message"], "The provided continue parameter is too old");
  EXPECT_FALSE(ProtobufStatusAsJson("{\"kind\":\"Status\"}").has_value());
  EXPECT_FALSE(ProtobufStatusAsJson(Envelope("PodList", "")).has_value());
}

// A string that is not UTF-8 (a protobuf client can store one: the API server keeps its bytes)
// reads as the API server's JSON has it, each byte that begins no valid sequence as U+FFFD (Go's
// encoding/json), instead of failing the whole list. protobuf_wire_fuzz found that such a string
// made a JSON that threw when dumped; proto3 then refused the list, which let one pod's
// annotation stop every list of pods (Informer.APodAnnotationThatIsNotUtf8 in
// k8s_client_e2e_test performs it on a real API server).
TEST(ProtobufWire, AStringThatIsNotUtf8ReadsAsTheApiServersJson) {
  const std::string r = "\xEF\xBF\xBD";  // U+FFFD
  pb::PodList list;
  pb::ObjectMeta* m = list.add_items()->mutable_metadata();
  m->set_name(std::string("p\x99", 2));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"\xff\xfe", r + r},
      {"ok \xC3\xA9 \xF0\x9F\x98\x80 \xEF\xBF\xBD", "ok \xC3\xA9 \xF0\x9F\x98\x80 \xEF\xBF\xBD"},
      {"\xC0\x80", r + r},                  // overlong
      {"\xED\xA0\x80", r + r + r},          // a surrogate
      {"\xF4\x90\x80\x80", r + r + r + r},  // above U+10FFFF
      {"a\xE2\x82", "a" + r + r},           // cut short
      {"\xE2\x82\xAC", "\xE2\x82\xAC"},     // the euro sign, whole
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    (*m->mutable_annotations())[StrCat("k", i)] = cases[i].first;
  }
  (*m->mutable_labels())[std::string("\xff", 1)] = "v";
  absl::StatusOr<json> got = ProtobufListToJson(Envelope("PodList", list.SerializeAsString()));
  ASSERT_TRUE(got.ok()) << got.status();
  const json& meta = (*got)["items"][0]["metadata"];
  EXPECT_EQ(meta["name"], "p" + r);
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(meta["annotations"][StrCat("k", i)], cases[i].second) << i;
  }
  EXPECT_EQ(meta["labels"][r], "v");
  EXPECT_NO_THROW((void)got->dump());
  pb::Status st;
  st.set_reason(std::string("\xff", 1));
  const std::optional<std::string> j =
      ProtobufStatusAsJson(Envelope("Status", st.SerializeAsString()));
  ASSERT_TRUE(j.has_value());
  EXPECT_EQ(json::parse(*j)["reason"], r);
}

// Fields the .proto does not declare (everything else of a Pod) are skipped, not errors.
TEST(ProtobufWire, UnknownFieldsAreSkipped) {
  pb::Pod pod;
  pod.mutable_metadata()->set_name("p");
  std::string raw = pod.SerializeAsString();
  // PodSpec field 1 (volumes), a nested message the .proto does not declare, inside spec (2).
  const std::string volumes = std::string("\x0a\x03\x0a\x01v", 5);
  raw += std::string("\x12") + static_cast<char>(volumes.size()) + volumes;
  pb::PodList list;
  ASSERT_TRUE(list.add_items()->ParseFromString(raw));
  absl::StatusOr<json> got = ProtobufListToJson(Envelope("PodList", list.SerializeAsString()));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)["items"][0]["metadata"]["name"], "p");
}

// A watch frame (a WatchEvent without envelope, its object with one) reads as the JSON line the
// API server would have sent; the object as a list's item would, with its kind.
TEST(ProtobufWire, AWatchFrameReadsAsTheJsonLine) {
  pb::Pod pod;
  pod.mutable_metadata()->set_name("p");
  pod.mutable_metadata()->set_namespace_("ns");
  pod.mutable_metadata()->set_resourceversion("42");
  pod.mutable_spec()->set_nodename("n1");
  pb::WatchEvent event;
  event.set_type("MODIFIED");
  event.mutable_object()->set_raw(Envelope("Pod", pod.SerializeAsString()));
  absl::StatusOr<json> got = ProtobufWatchEventToJson(event.SerializeAsString());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, json::parse(R"({"type": "MODIFIED", "object": {"kind": "Pod", "apiVersion": "v1",
      "metadata": {"name": "p", "namespace": "ns", "resourceVersion": "42"},
      "spec": {"containers": [], "nodeName": "n1"}, "status": {}}})"))
      << got->dump();

  pb::Node node;
  node.mutable_metadata()->set_name("n1");
  node.mutable_spec()->set_unschedulable(true);
  event.set_type("ADDED");
  event.mutable_object()->set_raw(Envelope("Node", node.SerializeAsString()));
  got = ProtobufWatchEventToJson(event.SerializeAsString());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)["object"]["kind"], "Node");
  EXPECT_EQ((*got)["object"]["spec"]["unschedulable"], true);

  // "Too old" in a watch: an ERROR event whose object is a Status.
  pb::Status st;
  st.set_status("Failure");
  st.set_reason("Expired");
  st.set_code(410);
  event.set_type("ERROR");
  event.mutable_object()->set_raw(Envelope("Status", st.SerializeAsString()));
  got = ProtobufWatchEventToJson(event.SerializeAsString());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)["object"]["code"], 410);
  EXPECT_EQ((*got)["object"]["reason"], "Expired");
}

TEST(ProtobufWire, AWatchFrameThatIsNotAnEventOfOursIsRefusedWithWhy) {
  pb::WatchEvent event;
  event.mutable_object()->set_raw(Envelope("Pod", ""));
  EXPECT_THAT(ProtobufWatchEventToJson(event.SerializeAsString()).status().message(),
              HasSubstr("has no type"));
  event.set_type("ADDED");
  event.clear_object();
  EXPECT_THAT(ProtobufWatchEventToJson(event.SerializeAsString()).status().message(),
              HasSubstr("a ADDED watch frame has no object"));
  event.mutable_object()->set_raw(Envelope("ConfigMap", ""));
  EXPECT_THAT(ProtobufWatchEventToJson(event.SerializeAsString()).status().message(),
              HasSubstr("a protobuf ConfigMap where a Pod or Node or Status was expected"));
  event.mutable_object()->set_raw(Envelope("PodList", ""));
  EXPECT_FALSE(ProtobufWatchEventToJson(event.SerializeAsString()).ok());
  event.mutable_object()->set_raw("{\"kind\":\"Pod\"}");  // JSON inside a protobuf frame
  EXPECT_THAT(ProtobufWatchEventToJson(event.SerializeAsString()).status().message(),
              HasSubstr("not in Kubernetes' protobuf envelope"));
  EXPECT_THAT(ProtobufWatchEventToJson(std::string("\x0a\xff", 2)).status().message(),
              HasSubstr("not a WatchEvent"));
  // A Pod whose own bytes do not parse.
  event.mutable_object()->set_raw(Envelope("Pod", "\x12\x05\x0a"));
  EXPECT_THAT(ProtobufWatchEventToJson(event.SerializeAsString()).status().message(),
              HasSubstr("a Pod does not parse"));
}

}  // namespace
}  // namespace tessera::k8s
