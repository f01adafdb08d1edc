// The client against the real API server (one control plane for this binary, see
// test/controlplane/controlplane.h): authentication, writes and conflicts, bindings, list +
// watch with relists after "too old", many requests in flight, leader election.
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/strings.h"
#include "controlplane/controlplane.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "k8s/client/config.h"
#include "k8s/client/http.h"
#include "k8s/client/informer.h"
#include "k8s/client/leader_election.h"
#include "k8s_core.pb.h"

namespace tessera::k8s {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

e2e::ControlPlane& Cp() { return e2e::ControlPlane::Shared(); }

std::unique_ptr<ApiClient> Admin() {
  absl::StatusOr<ClientConfig> config = LoadKubeconfig(Cp().kubeconfig());
  EXPECT_TRUE(config.ok()) << config.status();
  absl::StatusOr<std::unique_ptr<ApiClient>> client = ApiClient::Create(*config);
  EXPECT_TRUE(client.ok()) << client.status();
  return std::move(*client);
}

void MakeNamespace(ApiClient& c, const std::string& ns) {
  absl::StatusOr<json> r =
      c.Create("/api/v1/namespaces",
               {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", ns}}}});
  ASSERT_TRUE(r.ok() || r.status().code() == absl::StatusCode::kAlreadyExists) << r.status();
}

json ConfigMap(const std::string& ns, const std::string& name, const std::string& value) {
  return {{"apiVersion", "v1"},
          {"kind", "ConfigMap"},
          {"metadata", {{"name", name}, {"namespace", ns}}},
          {"data", {{"k", value}}}};
}

template <typename Pred>
bool WaitFor(Pred pred, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

TEST(Client, AdminKubeconfigWithClientCertificates) {
  auto c = Admin();
  absl::StatusOr<json> v = c->Get("/version");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ((*v)["gitVersion"], "v1.37.2");
  absl::StatusOr<json> ns = c->Get("/api/v1/namespaces/default");
  ASSERT_TRUE(ns.ok()) << ns.status();
  EXPECT_EQ((*ns)["metadata"]["name"], "default");
}

TEST(Client, WrongCaIsRefusedByTls) {
  absl::StatusOr<ClientConfig> config = LoadKubeconfig(Cp().kubeconfig());
  ASSERT_TRUE(config.ok());
  config->ca_pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
  ApiClientOptions o;
  o.max_attempts = 1;
  auto c = ApiClient::Create(*config, o);
  ASSERT_TRUE(c.ok());
  absl::StatusOr<json> v = (*c)->Get("/version");
  EXPECT_FALSE(v.ok());
  EXPECT_EQ(HttpStatusOf(v.status()), 0);
}

TEST(Client, CreateGetPatchUpdateAndConflicts) {
  auto c = Admin();
  MakeNamespace(*c, "client-crud");
  const std::string base = "/api/v1/namespaces/client-crud/configmaps";
  ASSERT_TRUE(c->Create(base, ConfigMap("client-crud", "one", "1")).ok());
  absl::StatusOr<json> dup = c->Create(base, ConfigMap("client-crud", "one", "1"));
  EXPECT_EQ(dup.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(ReasonOf(dup.status()), "AlreadyExists");

  absl::StatusOr<json> merged =
      c->Patch(base + "/one", PatchType::kMerge, {{"data", {{"m", "merge"}}}});
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_EQ((*merged)["data"]["m"], "merge");
  EXPECT_EQ((*merged)["data"]["k"], "1");
  absl::StatusOr<json> strategic =
      c->Patch(base + "/one", PatchType::kStrategic, {{"data", {{"s", "strategic"}}}});
  ASSERT_TRUE(strategic.ok()) << strategic.status();
  EXPECT_EQ((*strategic)["data"]["s"], "strategic");
  absl::StatusOr<json> jsonpatch =
      c->Patch(base + "/one", PatchType::kJson,
               json::array({{{"op", "replace"}, {"path", "/data/k"}, {"value", "2"}}}));
  ASSERT_TRUE(jsonpatch.ok()) << jsonpatch.status();
  EXPECT_EQ((*jsonpatch)["data"]["k"], "2");

  // A PUT with a stale resourceVersion is a 409 Conflict.
  json stale = *merged;
  stale["data"]["k"] = "stale";
  absl::StatusOr<json> put = c->Update(base + "/one", stale);
  EXPECT_EQ(put.status().code(), absl::StatusCode::kAborted) << put.status();
  EXPECT_EQ(HttpStatusOf(put.status()), 409);
  json fresh = *jsonpatch;
  fresh["data"]["k"] = "fresh";
  ASSERT_TRUE(c->Update(base + "/one", fresh).ok());

  EXPECT_EQ(c->Get(base + "/nope").status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(c->Delete(base + "/one").ok());
  EXPECT_EQ(c->Get(base + "/one").status().code(), absl::StatusCode::kNotFound);
}

TEST(Client, BindingCarriesAnnotationsOntoThePodInTheSameUpdate) {
  auto c = Admin();
  MakeNamespace(*c, "client-bind");
  ASSERT_TRUE(c->Create("/api/v1/nodes", {{"apiVersion", "v1"},
                                          {"kind", "Node"},
                                          {"metadata", {{"name", "client-bind-node"}}}})
                  .ok());
  json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", {{"name", "p"}, {"namespace", "client-bind"}}},
              {"spec",
               {{"schedulerName", "tessera"},
                {"containers", json::array({{{"name", "c"}, {"image", "x"}}})}}}};
  absl::StatusOr<json> created = c->Create("/api/v1/namespaces/client-bind/pods", pod);
  ASSERT_TRUE(created.ok()) << created.status();
  std::string uid = (*created)["metadata"]["uid"];

  // A wrong UID is a precondition failure: nothing is written.
  absl::Status wrong = c->Bind("client-bind", "p", "not-the-uid", "client-bind-node");
  EXPECT_FALSE(wrong.ok());
  EXPECT_EQ(HttpStatusOf(wrong), 409) << wrong;

  absl::Status bound = c->Bind("client-bind", "p", uid, "client-bind-node",
                               {{"tessera.dev/assignment", "{\"version\":1}"}});
  ASSERT_TRUE(bound.ok()) << bound;
  absl::StatusOr<json> got = c->Get("/api/v1/namespaces/client-bind/pods/p");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ((*got)["spec"]["nodeName"], "client-bind-node");
  EXPECT_EQ((*got)["metadata"]["annotations"]["tessera.dev/assignment"], "{\"version\":1}");

  absl::Status again = c->Bind("client-bind", "p", uid, "client-bind-node");
  EXPECT_EQ(HttpStatusOf(again), 409);
  EXPECT_THAT(std::string(FromAbsl(again.message())), HasSubstr("already assigned"));
  ASSERT_TRUE(c->Delete("/api/v1/nodes/client-bind-node").ok());
}

// A ConfigMap informer: what it reports, in order, mirrors the server.
struct Recorder {
  std::mutex mu;
  std::vector<std::string> log;
  std::map<std::string, std::string> state;
  std::atomic<int> synced{0};
  void operator()(Informer<json>::Event&& e) {
    std::lock_guard<std::mutex> lock(mu);
    switch (e.kind) {
      case Informer<json>::Event::kAdded:
      case Informer<json>::Event::kUpdated:
        state[e.key] = e.object->value("data", json::object()).value("k", "");
        log.push_back(StrCat(e.kind == Informer<json>::Event::kAdded ? "+" : "~", e.key));
        break;
      case Informer<json>::Event::kDeleted:
        state.erase(e.key);
        log.push_back(StrCat("-", e.key));
        break;
      case Informer<json>::Event::kSynced:
        ++synced;
        break;
    }
  }
  std::map<std::string, std::string> Snapshot() {
    std::lock_guard<std::mutex> lock(mu);
    return state;
  }
};

ListWatchOptions ConfigMapsIn(const std::string& ns) {
  ListWatchOptions o;
  o.resource = "configmaps";
  o.path = StrCat("/api/v1/namespaces/", ns, "/configmaps");
  o.page_size = 3;  // several pages even for a handful of objects
  o.label_selector = "informer-test=yes";
  return o;
}

json Labelled(json cm) {
  cm["metadata"]["labels"] = {{"informer-test", "yes"}};
  return cm;
}

TEST(Informer, ListsInPagesThenWatchesAddsUpdatesAndDeletes) {
  auto c = Admin();
  const std::string ns = "client-informer";
  MakeNamespace(*c, ns);
  const std::string base = StrCat("/api/v1/namespaces/", ns, "/configmaps");
  for (int i = 0; i < 7; ++i) {
    ASSERT_TRUE(c->Create(base, Labelled(ConfigMap(ns, StrCat("pre-", i), "0"))).ok());
  }
  ASSERT_TRUE(c->Create(base, ConfigMap(ns, "unlabelled", "0")).ok());
  Recorder rec;
  Informer<json> inf(
      *c, ConfigMapsIn(ns), [](const json& j) { return std::make_shared<const json>(j); },
      [&](Informer<json>::Event&& e) { rec(std::move(e)); });
  inf.Start();
  ASSERT_TRUE(WaitFor([&] { return inf.synced(); }));
  EXPECT_EQ(inf.size(), 7u);
  ASSERT_TRUE(c->Create(base, Labelled(ConfigMap(ns, "new", "1"))).ok());
  ASSERT_TRUE(c->Patch(base + "/pre-0", PatchType::kMerge, {{"data", {{"k", "changed"}}}}).ok());
  ASSERT_TRUE(c->Delete(base + "/pre-1").ok());
  ASSERT_TRUE(WaitFor([&] {
    auto s = rec.Snapshot();
    return s.size() == 7 && s.count(ns + "/new") && s[ns + "/pre-0"] == "changed" &&
           !s.count(ns + "/pre-1");
  })) << StrJoin(rec.log, " ");
  EXPECT_EQ(inf.Get(ns + "/new")->at("data").at("k"), "1");
  EXPECT_EQ(inf.Get(ns + "/pre-1"), nullptr);
  EXPECT_EQ(inf.Get(ns + "/unlabelled"), nullptr);
  EXPECT_EQ(inf.lists(), 1);
  EXPECT_EQ(inf.too_old(), 0);
  inf.Stop();
}

json LabelledPod(const std::string& ns, const std::string& name) {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", name}, {"namespace", ns}, {"labels", {{"informer-test", "yes"}}}}},
          {"spec",
           {{"schedulerName", "nobody"},  // never bound: deleted at once, no kubelet needed
            {"containers",
             {{{"name", "c"},
               {"image", "x"},
               {"resources", {{"limits", {{"tessera.dev/gpu-memory", "4Gi"}}}}}}}}}}};
}

// Pods and Nodes listed and watched in protobuf (protobuf_wire.h) report the same events as in
// JSON, every page and every watch came in protobuf, and the objects carry the same fields that
// tessera reads.
TEST(Informer, PodsAndNodesInProtobufReadAsInJson) {
  auto c = Admin();
  const std::string ns = "client-protobuf";
  MakeNamespace(*c, ns);
  const std::string base = StrCat("/api/v1/namespaces/", ns, "/pods");
  for (int i = 0; i < 7; ++i) ASSERT_TRUE(c->Create(base, LabelledPod(ns, StrCat("pre-", i))).ok());
  json node = {
      {"apiVersion", "v1"},
      {"kind", "Node"},
      {"metadata", {{"name", "client-protobuf-node"}, {"labels", {{"informer-test", "yes"}}}}}};
  ASSERT_TRUE(c->Create("/api/v1/nodes", node).ok());
  ListWatchOptions o;
  o.resource = "pods";
  o.path = base;
  o.page_size = 3;
  o.label_selector = "informer-test=yes";
  auto keep = [](const json& j) { return std::make_shared<const json>(j); };
  Recorder json_rec, proto_rec;
  Informer<json> in_json(*c, o, keep, [&](Informer<json>::Event&& e) { json_rec(std::move(e)); });
  o.protobuf = true;
  Informer<json> in_proto(*c, o, keep, [&](Informer<json>::Event&& e) { proto_rec(std::move(e)); });
  // The list pages read in place (protobuf_value.h: what DecodePod and DecodeNode read), kept as
  // the JSON they answer as: the same objects and events as the JSON shape's.
  auto keep_in_place = [](const ProtobufValue& v) {
    return std::make_shared<const json>(ProtobufValueToJson(v));
  };
  Recorder in_place_rec;
  Informer<json> in_place(*c, o, keep, keep_in_place,
                          [&](Informer<json>::Event&& e) { in_place_rec(std::move(e)); });
  ListWatchOptions no = o;
  no.resource = "nodes";
  no.path = "/api/v1/nodes";
  Recorder node_rec;
  Informer<json> nodes(*c, no, keep, [&](Informer<json>::Event&& e) { node_rec(std::move(e)); });
  in_json.Start();
  in_proto.Start();
  in_place.Start();
  nodes.Start();
  ASSERT_TRUE(WaitFor([&] {
    return in_json.synced() && in_proto.synced() && in_place.synced() && nodes.synced();
  }));
  EXPECT_EQ(in_proto.size(), 7u);
  ASSERT_EQ(in_place.size(), 7u);
  for (const std::shared_ptr<const json>& p : in_proto.List()) {
    std::shared_ptr<const json> q = in_place.Get(KeyOf(*p));
    ASSERT_NE(q, nullptr) << KeyOf(*p);
    EXPECT_EQ(*q, *p);
  }
  EXPECT_EQ(nodes.size(), 1u);
  ASSERT_TRUE(c->Create(base, LabelledPod(ns, "new")).ok());
  ASSERT_TRUE(
      c->Patch(base + "/pre-0", PatchType::kMerge, {{"metadata", {{"labels", {{"x", "y"}}}}}})
          .ok());
  ASSERT_TRUE(c->Delete(base + "/pre-1").ok());
  ASSERT_TRUE(c->Patch("/api/v1/nodes/client-protobuf-node", PatchType::kMerge,
                       {{"spec", {{"unschedulable", true}}}})
                  .ok());
  auto settled = [&](Informer<json>& inf) {
    std::shared_ptr<const json> pre0 = inf.Get(ns + "/pre-0");
    return inf.size() == 7 && inf.Get(ns + "/new") && !inf.Get(ns + "/pre-1") && pre0 &&
           pre0->at("metadata").at("labels").value("x", "") == "y";
  };
  ASSERT_TRUE(WaitFor([&] { return settled(in_json) && settled(in_proto) && settled(in_place); }))
      << "JSON: " << StrJoin(json_rec.log, " ") << "\nprotobuf: " << StrJoin(proto_rec.log, " ");
  ASSERT_TRUE(WaitFor([&] {
    std::shared_ptr<const json> n = nodes.Get("client-protobuf-node");
    return n && n->at("spec").value("unschedulable", false);
  }));
  {
    std::lock_guard<std::mutex> a(json_rec.mu), b(proto_rec.mu), d(in_place_rec.mu);
    EXPECT_EQ(proto_rec.log, json_rec.log);
    EXPECT_EQ(in_place_rec.log, json_rec.log);
  }
  // Every field the protobuf reading declares (the rest is not read) is the JSON's.
  for (const std::shared_ptr<const json>& p : in_proto.List()) {
    const std::string key = KeyOf(*p);
    SCOPED_TRACE(key);
    std::shared_ptr<const json> j = in_json.Get(key);
    ASSERT_NE(j, nullptr);
    for (const char* f :
         {"name", "namespace", "uid", "resourceVersion", "labels", "creationTimestamp"}) {
      EXPECT_EQ(p->at("metadata").at(f), j->at("metadata").at(f)) << f;
    }
    EXPECT_EQ(p->at("spec").at("containers"),
              json::array({{{"name", "c"},
                            {"resources", j->at("spec").at("containers").at(0).at("resources")}}}));
    EXPECT_EQ(p->at("spec").at("schedulerName"), "nobody");
    EXPECT_EQ(p->at("status").at("phase"), j->at("status").at("phase"));
  }
  // 7 pods in pages of 3, then the watch: all in protobuf; the JSON informer got none.
  EXPECT_EQ(in_proto.protobuf_pages(), 3);
  EXPECT_EQ(in_json.protobuf_pages(), 0);
  EXPECT_EQ(in_place.protobuf_pages(), 3);
  EXPECT_GE(nodes.protobuf_pages(), 1);
  in_json.Stop();
  in_proto.Stop();
  in_place.Stop();
  nodes.Stop();
  // Stopped: each watch has ended and counted what it was.
  EXPECT_GE(in_proto.protobuf_watches(), 1);
  EXPECT_EQ(in_json.protobuf_watches(), 0);
  EXPECT_GE(nodes.protobuf_watches(), 1);
  ASSERT_TRUE(c->Delete("/api/v1/nodes/client-protobuf-node").ok());
}

// The attack: anyone who may create a pod can give it an annotation that is not UTF-8 by
// writing it in protobuf (the API server keeps the bytes; its JSON shows U+FFFD). A reader that
// refused such a string refused the whole list page or watch event that held it: the scheduler
// would never finish listing pods. Read in protobuf, the pod is listed and watched, and its
// annotation is what the JSON reader sees.
TEST(Informer, APodAnnotationThatIsNotUtf8NeitherStopsTheListNorTheWatch) {
  auto c = Admin();
  const std::string ns = "client-utf8";
  MakeNamespace(*c, ns);
  const std::string base = StrCat("/api/v1/namespaces/", ns, "/pods");
  auto create_in_protobuf = [&](const std::string& name) {
    // Field by field as a protobuf client writes it. Our .proto has no Container.image (2),
    // which the API server requires: the container is written with it by hand, in PodSpec's
    // containers (2), in Pod's spec (2); every length here is under 128, one byte.
    auto field = [](char key, const std::string& bytes) {
      return std::string(1, key) + static_cast<char>(bytes.size()) + bytes;
    };
    wire::Container container;
    container.set_name("c");
    wire::PodSpec spec;
    spec.set_schedulername("nobody");
    const std::string spec_raw = spec.SerializeAsString() +
                                 field('\x12', container.SerializeAsString() + field('\x12', "x"));
    wire::Pod pod;
    pod.mutable_metadata()->set_name(name);
    pod.mutable_metadata()->set_namespace_(ns);
    (*pod.mutable_metadata()->mutable_annotations())["a"] = std::string("\xff\xfe", 2);
    wire::Unknown u;
    u.mutable_typemeta()->set_apiversion("v1");
    u.mutable_typemeta()->set_kind("Pod");
    u.set_raw(pod.SerializeAsString() + field('\x12', spec_raw));
    HttpResponse r =
        c->Call(HttpRequest{"POST", base, std::string("k8s\0", 4) + u.SerializeAsString(),
                            "application/vnd.kubernetes.protobuf"});
    ASSERT_EQ(r.status, 201) << r.body;
  };
  create_in_protobuf("listed");
  absl::StatusOr<json> seen = c->Get(base + "/listed");
  ASSERT_TRUE(seen.ok()) << seen.status();
  const std::string replaced = "\xEF\xBF\xBD\xEF\xBF\xBD";  // U+FFFD twice, as the JSON has it
  ASSERT_EQ(seen->at("metadata").at("annotations").at("a"), replaced);

  ListWatchOptions o;
  o.resource = "pods";
  o.path = base;
  o.protobuf = true;
  auto keep = [](const json& j) { return std::make_shared<const json>(j); };
  Recorder rec;
  Informer<json> inf(*c, o, keep, [&](Informer<json>::Event&& e) { rec(std::move(e)); });
  // And the list read in place (protobuf_value.h), as the scheduler's pods and nodes are.
  Informer<json> in_place(
      *c, o, keep,
      [](const ProtobufValue& v) { return std::make_shared<const json>(ProtobufValueToJson(v)); },
      [](Informer<json>::Event&&) {});
  inf.Start();
  in_place.Start();
  ASSERT_TRUE(WaitFor([&] { return inf.synced() && in_place.synced(); }))
      << "failures " << inf.failures() << ", in place " << in_place.failures();
  EXPECT_EQ(inf.protobuf_pages(), 1);
  EXPECT_EQ(in_place.protobuf_pages(), 1);
  ASSERT_NE(inf.Get(ns + "/listed"), nullptr);
  EXPECT_EQ(inf.Get(ns + "/listed")->at("metadata").at("annotations").at("a"), replaced);
  ASSERT_NE(in_place.Get(ns + "/listed"), nullptr);
  EXPECT_EQ(in_place.Get(ns + "/listed")->at("metadata").at("annotations").at("a"), replaced);
  EXPECT_EQ(in_place.failures(), 0);
  in_place.Stop();
  create_in_protobuf("watched");
  ASSERT_TRUE(WaitFor([&] { return inf.Get(ns + "/watched") != nullptr; }))
      << "failures " << inf.failures() << ": " << StrJoin(rec.log, " ");
  EXPECT_EQ(inf.Get(ns + "/watched")->at("metadata").at("annotations").at("a"), replaced);
  EXPECT_EQ(inf.failures(), 0);
  inf.Stop();
  EXPECT_GE(inf.protobuf_watches(), 1);
}

// A resource the API server does not serve (404 on the list, as PodGroups without the
// GenericWorkload gate): with absent_retry it is an empty, synced list asked again after that
// long, not a failure; without, a failure retried with back-off and never synced.
TEST(Informer, AnAbsentResourceIsAnEmptyListWithAbsentRetry) {
  auto c = Admin();
  ListWatchOptions o;
  o.resource = "things";
  o.path = "/apis/absent.tessera.dev/v1/things";
  o.absent_retry = std::chrono::milliseconds(200);
  Recorder rec;
  Informer<json> absent(
      *c, o, [](const json& j) { return std::make_shared<const json>(j); },
      [&](Informer<json>::Event&& e) { rec(std::move(e)); });
  o.absent_retry = std::chrono::milliseconds(0);
  Informer<json> failing(
      *c, o, [](const json& j) { return std::make_shared<const json>(j); },
      [](Informer<json>::Event&&) {});
  absent.Start();
  failing.Start();
  ASSERT_TRUE(WaitFor([&] { return absent.lists() >= 3; }));
  EXPECT_TRUE(absent.synced());
  EXPECT_GE(rec.synced.load(), 3);
  EXPECT_EQ(absent.size(), 0u);
  EXPECT_EQ(absent.failures(), 0);
  ASSERT_TRUE(WaitFor([&] { return failing.failures() >= 1; }));
  EXPECT_FALSE(failing.synced());
  absent.Stop();
  failing.Stop();
}

json Event(const std::string& ns, const std::string& name) {
  return {{"apiVersion", "v1"},
          {"kind", "Event"},
          {"metadata", {{"name", name}, {"namespace", ns}, {"labels", {{"informer-test", "yes"}}}}},
          {"involvedObject", {{"kind", "Pod"}, {"namespace", ns}, {"name", "nobody"}}},
          {"reason", "Test"},
          {"message", "m"},
          {"type", "Normal"}};
}

// Compacts etcd's history up to `revision` (its JSON gateway, with the API server's client
// certificate), so that watches from older resourceVersions are "too old".
void CompactEtcd(const std::string& revision) {
  std::ifstream env(Cp().dir() + "/cluster.env");
  std::string line, url;
  while (std::getline(env, line)) {
    if (line.rfind("etcd_url=", 0) == 0) url = line.substr(9);
  }
  ASSERT_FALSE(url.empty());
  ClientConfig etcd;
  etcd.server = url;
  etcd.ca_pem = *ReadWholeFile(Cp().dir() + "/pki/ca.crt");
  etcd.client_cert_pem = *ReadWholeFile(Cp().dir() + "/pki/serving.crt");
  etcd.client_key_pem = *ReadWholeFile(Cp().dir() + "/pki/serving.key");
  auto c = ApiClient::Create(etcd);
  ASSERT_TRUE(c.ok());
  HttpResponse r = (*c)->Call(HttpRequest{"POST", "/v3/kv/compaction",
                                          json{{"revision", revision}, {"physical", true}}.dump(),
                                          "application/json"});
  ASSERT_EQ(r.status, 200) << r.error << r.body;
}

// Events have no watch cache in kube-apiserver (DefaultWatchCacheSizes), so a watch on them from a
// compacted resourceVersion reaches etcd and is answered "too old" on the wire.
TEST(Informer, TooOldResourceVersionFromTheServerLeadsToARelist) {
  auto c = Admin();
  const std::string ns = "client-410";
  MakeNamespace(*c, ns);
  const std::string base = StrCat("/api/v1/namespaces/", ns, "/events");
  absl::StatusOr<json> first = c->Create(base, Event(ns, "a"));
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string old_rv = ResourceVersionOf(*first);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(c->Create(base, Event(ns, StrCat("b", i))).ok());
  absl::StatusOr<json> last = c->Create(base, Event(ns, "c"));
  ASSERT_TRUE(last.ok());
  CompactEtcd(ResourceVersionOf(*last));

  // What the server says, as it is on the wire: HTTP 410, or HTTP 200 and an ERROR event.
  auto conn = c->NewConnection();
  std::string raw;
  HttpResponse r = conn->Stream(
      HttpRequest{"GET", StrCat(base, "?watch=1&resourceVersion=", old_rv, "&timeoutSeconds=5"), "",
                  "", std::chrono::milliseconds(10'000)},
      [&](std::string_view b) {
        raw.append(b);
        return raw.find('\n') == std::string::npos;
      },
      nullptr);
  bool too_old = r.status == 410 && IsTooOldStatus(json::parse(r.body));
  if (!too_old && !raw.empty()) {
    absl::StatusOr<WatchEvent> e = DecodeWatchLine(raw.substr(0, raw.find('\n')));
    ASSERT_TRUE(e.ok()) << raw;
    too_old = IsTooOld(*e);
  }
  EXPECT_TRUE(too_old) << "status " << r.status << " body " << r.body << " stream " << raw;

  // The informer, made to watch from that version after its first list, relists and carries on.
  ListWatchOptions o;
  o.resource = "events";
  o.path = base;
  o.label_selector = "informer-test=yes";
  o.first_watch_resource_version = old_rv;
  Recorder rec;
  Informer<json> inf(
      *c, o, [](const json& j) { return std::make_shared<const json>(j); },
      [&](Informer<json>::Event&& e) { rec(std::move(e)); });
  inf.Start();
  ASSERT_TRUE(WaitFor([&] { return inf.too_old() >= 1 && inf.lists() >= 2; }))
      << "too_old " << inf.too_old() << " lists " << inf.lists();
  {
    // The relist reports the objects it finds again as updates, not as new ones.
    std::lock_guard<std::mutex> lock(rec.mu);
    EXPECT_EQ(std::count(rec.log.begin(), rec.log.end(), StrCat("~", ns, "/c")), 1)
        << StrJoin(rec.log, " ");
    EXPECT_EQ(std::count(rec.log.begin(), rec.log.end(), StrCat("+", ns, "/c")), 1);
  }
  ASSERT_TRUE(c->Create(base, Event(ns, "after")).ok());
  ASSERT_TRUE(WaitFor([&] { return rec.Snapshot().size() == 8; }));
  EXPECT_EQ(rec.Snapshot().count(ns + "/after"), 1u);
  EXPECT_GE(rec.synced, 2);
  inf.Stop();
}

TEST(AsyncClient, ManyRequestsInFlightAllComplete) {
  auto c = Admin();
  const std::string ns = "client-async";
  MakeNamespace(*c, ns);
  AsyncClientOptions o;
  o.max_in_flight = 16;
  AsyncClient async(c->transport(), o);
  std::atomic<int> created{0}, failed{0};
  const int n = 200;
  for (int i = 0; i < n; ++i) {
    async.Submit(HttpRequest{"POST", StrCat("/api/v1/namespaces/", ns, "/configmaps"),
                             ConfigMap(ns, StrCat("cm-", i), "x").dump(), "application/json"},
                 [&](const HttpResponse& r) { (r.status == 201 ? created : failed)++; });
  }
  ASSERT_TRUE(async.Drain(std::chrono::seconds(60)));
  EXPECT_EQ(created.load(), n);
  EXPECT_EQ(failed.load(), 0);
  absl::StatusOr<json> list = c->Get(StrCat("/api/v1/namespaces/", ns, "/configmaps"));
  ASSERT_TRUE(list.ok());
  int ours = 0;
  for (const json& item : (*list)["items"]) {
    if (std::string(item["metadata"]["name"]).rfind("cm-", 0) == 0) ++ours;
  }
  EXPECT_EQ(ours, n);
}

// A service-account token (TokenRequest) used as a bearer token, from a file, via in-cluster
// configuration pointed at the test server.
TEST(Client, BearerTokenFromAServiceAccountThroughInClusterConfig) {
  auto c = Admin();
  const std::string ns = "client-token";
  MakeNamespace(*c, ns);
  ASSERT_TRUE(c->Create(StrCat("/api/v1/namespaces/", ns, "/serviceaccounts"),
                        {{"apiVersion", "v1"},
                         {"kind", "ServiceAccount"},
                         {"metadata", {{"name", "robot"}, {"namespace", ns}}}})
                  .ok());
  absl::StatusOr<json> token =
      c->Create(StrCat("/api/v1/namespaces/", ns, "/serviceaccounts/robot/token"),
                {{"apiVersion", "authentication.k8s.io/v1"},
                 {"kind", "TokenRequest"},
                 {"spec", {{"expirationSeconds", 3600}}}});
  ASSERT_TRUE(token.ok()) << token.status();

  std::string dir = StrCat(::testing::TempDir(), "/sa-", getpid());
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/token") << std::string((*token)["status"]["token"]);
  std::filesystem::copy_file(Cp().ca_file(), dir + "/ca.crt",
                             std::filesystem::copy_options::overwrite_existing);
  std::ofstream(dir + "/namespace") << ns;
  std::string server = Cp().server();  // https://127.0.0.1:PORT
  std::string hostport = server.substr(std::string("https://").size());
  InClusterSource src;
  src.service_account_dir = dir;
  src.getenv = [&](const char* k) -> std::optional<std::string> {
    if (std::string(k) == "KUBERNETES_SERVICE_HOST") return hostport.substr(0, hostport.find(':'));
    if (std::string(k) == "KUBERNETES_SERVICE_PORT") return hostport.substr(hostport.find(':') + 1);
    return std::nullopt;
  };
  absl::StatusOr<ClientConfig> config = InClusterConfig(src);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->default_namespace, ns);
  auto robot = ApiClient::Create(*config);
  ASSERT_TRUE(robot.ok());
  // Authenticated as the service account, which RBAC lets do nothing: 403 naming it.
  absl::StatusOr<json> pods = (*robot)->Get("/api/v1/pods");
  EXPECT_EQ(pods.status().code(), absl::StatusCode::kPermissionDenied) << pods.status();
  EXPECT_THAT(std::string(FromAbsl(pods.status().message())),
              HasSubstr(StrCat("system:serviceaccount:", ns, ":robot")));
  // A garbage token is not authenticated at all.
  std::ofstream(dir + "/token") << "garbage";
  config = InClusterConfig(src);
  auto stranger = ApiClient::Create(*config);
  EXPECT_EQ((*stranger)->Get("/api/v1/pods").status().code(), absl::StatusCode::kUnauthenticated);
  std::filesystem::remove_all(dir);
}

TEST(LeaderElection, OneLeaderAtATimeAndAReleasedLeaseIsTakenOver) {
  auto c = Admin();
  const std::string ns = "client-lease";
  MakeNamespace(*c, ns);
  auto config = [&](const std::string& id) {
    LeaderElectionConfig l;
    l.lease_namespace = ns;
    l.lease_name = "test";
    l.identity = id;
    l.lease_duration = std::chrono::seconds(3);
    l.renew_deadline = std::chrono::seconds(2);
    l.retry_period = std::chrono::milliseconds(300);
    EXPECT_TRUE(ValidateLeaderElection(l).ok());
    return l;
  };
  std::atomic<int> a_started{0}, b_started{0};
  LeaderElector a(*c, config("a"), {[&] { ++a_started; }, nullptr, nullptr});
  LeaderElector b(*c, config("b"), {[&] { ++b_started; }, nullptr, nullptr});
  a.Start();
  ASSERT_TRUE(WaitFor([&] { return a.IsLeader(); }));
  b.Start();
  std::this_thread::sleep_for(std::chrono::seconds(4));  // longer than the lease: a renews
  EXPECT_TRUE(a.IsLeader());
  EXPECT_FALSE(b.IsLeader());
  EXPECT_EQ(b.ObservedLeader(), "a");
  a.Stop();  // releases
  ASSERT_TRUE(WaitFor([&] { return b.IsLeader(); }, std::chrono::seconds(5)));
  absl::StatusOr<json> lease =
      c->Get(StrCat("/apis/coordination.k8s.io/v1/namespaces/", ns, "/leases/test"));
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ((*lease)["spec"]["holderIdentity"], "b");
  EXPECT_EQ((*lease)["spec"]["leaseTransitions"], 1);
  EXPECT_EQ(a_started.load(), 1);
  EXPECT_EQ(b_started.load(), 1);
  b.Stop();
}

}  // namespace
}  // namespace tessera::k8s
