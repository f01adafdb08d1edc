// deploy/ for the node agent against the real API server: the manifests pass server-side dry run,
// the admission policies refuse what they must (a user granting a pod a GPU through
// tessera.dev/assignment or cdi.k8s.io/*, by create, update, status or binding; an agent writing
// another node or keys that are not tessera's) and let the scheduler and the agent do their work,
// the agent's RBAC holds exactly the verbs it uses, an agent in DRA mode writes only its own node's
// ResourceSlices, and `tessera agent` publishes its node with nothing but its ServiceAccount's
// pod-bound token.
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "common/strings.h"
#include "controlplane/controlplane.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "k8s/client/config.h"
#include "k8s/client/http.h"
#include "records/inventory.h"
#include "scoped_process.h"

namespace tessera::e2e {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;

ControlPlane& Cp() { return ControlPlane::Shared(); }

const std::string kScheduler = "system:serviceaccount:tessera-system:tessera-scheduler";
const std::string kAgent = "system:serviceaccount:tessera-system:tessera-agent";

template <typename Pred>
bool WaitUntil(Pred pred, milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(milliseconds(100));
  }
  return pred();
}

std::string Deploy(const std::string& file) { return StrCat(TESSERA_SOURCE_DIR, "/deploy/", file); }

std::unique_ptr<k8s::ApiClient> Client(const k8s::ClientConfig& config) {
  k8s::ApiClientOptions o;
  o.max_attempts = 1;
  absl::StatusOr<std::unique_ptr<k8s::ApiClient>> c = k8s::ApiClient::Create(config, o);
  EXPECT_TRUE(c.ok()) << c.status();
  return std::move(*c);
}

std::unique_ptr<k8s::ApiClient> Admin() {
  absl::StatusOr<k8s::ClientConfig> config = k8s::LoadKubeconfig(Cp().kubeconfig());
  EXPECT_TRUE(config.ok()) << config.status();
  return Client(*config);
}

// Installs deploy/: the namespace, both ServiceAccounts and their RBAC, the admission policies.
// Once per binary; the policies take a moment to be enforced, so wait until one refuses.
void InstallOnce() {
  static bool installed = false;
  if (installed) return;
  installed = true;
  ASSERT_TRUE(Cp().KubectlOk({"apply", "-f", Deploy("namespace.yaml")}).ok());
  absl::StatusOr<std::string> applied =
      Cp().KubectlOk({"apply", "-f", Deploy("serviceaccount.yaml"), "-f", Deploy("rbac.yaml"), "-f",
                      Deploy("agent-serviceaccount.yaml"), "-f", Deploy("agent-rbac.yaml"), "-f",
                      Deploy("admission-policy.yaml")});
  ASSERT_TRUE(applied.ok()) << applied.status();
  auto admin = Admin();
  ASSERT_TRUE(
      admin
          ->Create("/api/v1/namespaces",
                   {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", "team"}}}})
          .ok());
  // A user with the rights to create, change and bind pods in her namespace.
  ASSERT_TRUE(Cp().KubectlOk({"create", "role", "pod-editor", "-n", "team",
                              "--verb=get,list,create,update,patch",
                              "--resource=pods,pods/status,pods/binding"})
                  .ok());
  ASSERT_TRUE(Cp().KubectlOk({"create", "rolebinding", "alice", "-n", "team", "--role=pod-editor",
                              "--user=alice"})
                  .ok());
  const std::string probe = R"({"apiVersion":"v1","kind":"Pod","metadata":{"name":"probe",
      "annotations":{"tessera.dev/assignment":"{}"}},"spec":{"containers":[{"name":"c","image":"x"}]}})";
  ASSERT_TRUE(WaitUntil(
      [&] {
        CommandResult r = Cp().Kubectl(
            {"--as=alice", "create", "--dry-run=server", "-n", "team", "-f", "-"}, probe);
        return !r.ok() && r.err.find("tessera-assignment-guard") != std::string::npos;
      },
      seconds(30)));
}

constexpr char kAssignment[] =
    R"({"version":1,"node":"n1","gpus":[{"index":0,"uuid":"GPU-6f1c2a9e-0000-4000-8000-000000000000","memory_mib":4096,"compute_milli":0,"exclusive":false}]})";

json PodJson(const std::string& name, const json& annotations = json::object()) {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", name}, {"namespace", "team"}, {"annotations", annotations}}},
          {"spec", {{"containers", {{{"name", "c"}, {"image", "tessera.local/busybox:1"}}}}}}};
}

json Binding(const std::string& pod, const json& annotations) {
  json b = {{"apiVersion", "v1"},
            {"kind", "Binding"},
            {"metadata", {{"name", pod}, {"namespace", "team"}}},
            {"target", {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", "n1"}}}};
  if (!annotations.is_null()) b["metadata"]["annotations"] = annotations;
  return b;
}

// kubectl as `user` (impersonated by the admin), with `stdin` as the object.
CommandResult As(const std::string& user, std::vector<std::string> args,
                 const std::string& stdin_data = "") {
  std::vector<std::string> all = {"--as=" + user};
  if (user.rfind("system:serviceaccount:", 0) == 0) {
    all.push_back("--as-group=system:serviceaccounts");
    all.push_back("--as-group=system:serviceaccounts:tessera-system");
  }
  all.insert(all.end(), args.begin(), args.end());
  return Cp().Kubectl(all, stdin_data);
}

TEST(AgentDeploy, ManifestsPassServerSideDryRun) {
  ASSERT_TRUE(Cp().KubectlOk({"apply", "-f", Deploy("namespace.yaml")}).ok());
  CommandResult dry =
      Cp().Kubectl({"apply", "--dry-run=server", "-f", Deploy("agent-serviceaccount.yaml"), "-f",
                    Deploy("agent-rbac.yaml"), "-f", Deploy("agent-daemonset.yaml"), "-f",
                    Deploy("admission-policy.yaml")});
  ASSERT_TRUE(dry.ok()) << dry.out << dry.err;
  for (const char* what :
       {"serviceaccount/tessera-agent", "clusterrole.rbac.authorization.k8s.io/tessera-agent",
        "clusterrolebinding.rbac.authorization.k8s.io/tessera-agent",
        "daemonset.apps/tessera-agent",
        "validatingadmissionpolicy.admissionregistration.k8s.io/tessera-assignment-guard",
        "validatingadmissionpolicybinding.admissionregistration.k8s.io/tessera-assignment-guard",
        "validatingadmissionpolicy.admissionregistration.k8s.io/tessera-agent-node-scope",
        "validatingadmissionpolicybinding.admissionregistration.k8s.io/tessera-agent-node-scope",
        "validatingadmissionpolicy.admissionregistration.k8s.io/tessera-queue-guard",
        "validatingadmissionpolicybinding.admissionregistration.k8s.io/tessera-queue-guard"}) {
    EXPECT_THAT(dry.out, HasSubstr(std::string(what) + " created (server dry run)")) << dry.out;
  }
}

// The queue hijack, by the annotation: a running pod moved into another team's queue (or given
// one through its Binding). The tessera-queue-guard policy fixes tessera.dev/queue when the pod
// is created, whoever asks (issue 27; ctest label security: security_queue_hijack_annotation).
TEST(AgentDeploy, QueueHijackTheQueueAnnotationIsFixedWhenThePodIsCreated) {
  InstallOnce();
  ASSERT_TRUE(
      As("alice", {"create", "-f", "-"}, PodJson("queued", {{"tessera.dev/queue", "a"}}).dump())
          .ok());
  // The policy may be enforced a moment after the others.
  CommandResult moved;
  ASSERT_TRUE(WaitUntil(
      [&] {
        moved = As("alice", {"annotate", "--overwrite", "-n", "team", "pod/queued",
                             "tessera.dev/queue=other"});
        return !moved.ok();
      },
      seconds(30)))
      << "the queue annotation was changed";
  EXPECT_THAT(moved.err, HasSubstr("ValidatingAdmissionPolicy 'tessera-queue-guard'"));
  EXPECT_THAT(moved.err, HasSubstr("tessera.dev/queue annotation is fixed when the pod is "
                                   "created: alice may not add, change or remove it"));
  CommandResult removed =
      As("alice", {"annotate", "-n", "team", "pod/queued", "tessera.dev/queue-"});
  EXPECT_FALSE(removed.ok());
  EXPECT_THAT(removed.err, HasSubstr("tessera-queue-guard"));
  ASSERT_TRUE(As("alice", {"create", "-f", "-"}, PodJson("unqueued").dump()).ok());
  CommandResult added =
      As("alice", {"annotate", "-n", "team", "pod/unqueued", "tessera.dev/queue=other"});
  EXPECT_FALSE(added.ok());
  EXPECT_THAT(added.err, HasSubstr("tessera-queue-guard"));
  // Not even the admin or the scheduler; nor through a Binding.
  CommandResult admin = Cp().Kubectl(
      {"annotate", "--overwrite", "-n", "team", "pod/queued", "tessera.dev/queue=other"});
  EXPECT_FALSE(admin.ok());
  // Posted to the pod's binding subresource as the scheduler does (kubectl's own `create -f` would
  // first list CRDs, which the scheduler may not).
  CommandResult binding = As(
      kScheduler, {"create", "--raw", "/api/v1/namespaces/team/pods/unqueued/binding", "-f", "-"},
      Binding("unqueued", {{"tessera.dev/queue", "other"}}).dump());
  EXPECT_FALSE(binding.ok());
  EXPECT_THAT(binding.err, HasSubstr("tessera-queue-guard"));
  // Everything else about the pod may still change.
  EXPECT_TRUE(As("alice", {"annotate", "-n", "team", "pod/queued", "note=hi"}).ok());
  (void)Cp().Kubectl({"delete", "pod", "-n", "team", "queued", "unqueued", "--wait=false"});
}

TEST(AgentDeploy, OnlyTheSchedulerWritesAssignmentsAndCdiAnnotations) {
  InstallOnce();
  // Creating a pod that carries a grant: refused, whoever asks (the admin too).
  for (const json& annotations : {json{{"tessera.dev/assignment", kAssignment}},
                                  json{{"cdi.k8s.io/gpu", "nvidia.com/gpu=all"}}}) {
    CommandResult r = As("alice", {"create", "-f", "-"}, PodJson("grant", annotations).dump());
    EXPECT_FALSE(r.ok());
    EXPECT_THAT(r.err, HasSubstr("ValidatingAdmissionPolicy 'tessera-assignment-guard'"));
    EXPECT_THAT(r.err, HasSubstr("written only by the tessera scheduler: alice may not add, "
                                 "change or remove them"));
  }
  CommandResult admin =
      Cp().Kubectl({"create", "-f", "-"},
                   PodJson("admin-grant", {{"tessera.dev/assignment", kAssignment}}).dump());
  EXPECT_FALSE(admin.ok());
  EXPECT_THAT(admin.err, HasSubstr("tessera-assignment-guard"));

  // A plain pod is fine, and so are changes to anything else of it.
  ASSERT_TRUE(As("alice", {"create", "-f", "-"}, PodJson("plain", {{"a", "b"}}).dump()).ok());
  EXPECT_TRUE(As("alice", {"label", "-n", "team", "pod/plain", "x=y"}).ok());
  EXPECT_TRUE(As("alice", {"annotate", "-n", "team", "pod/plain", "note=hi"}).ok());
  // Adding a grant afterwards, through the pod or its status: refused.
  CommandResult later =
      As("alice", {"annotate", "-n", "team", "pod/plain", "tessera.dev/assignment=x"});
  EXPECT_FALSE(later.ok());
  EXPECT_THAT(later.err, HasSubstr("(tessera.dev/assignment)"));
  CommandResult status =
      As("alice", {"patch", "-n", "team", "pod/plain", "--subresource=status", "--type=merge", "-p",
                   R"({"metadata":{"annotations":{"cdi.k8s.io/x":"nvidia.com/gpu=0"}}})"});
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.err, HasSubstr("tessera-assignment-guard"));

  // Binding: the scheduler's way. Alice may bind (she has pods/binding) but not with a grant.
  CommandResult alice_binds =
      As("alice", {"create", "--raw", "/api/v1/namespaces/team/pods/plain/binding", "-f", "-"},
         Binding("plain", {{"tessera.dev/assignment", kAssignment}}).dump());
  EXPECT_FALSE(alice_binds.ok());
  EXPECT_THAT(alice_binds.err, HasSubstr("tessera-assignment-guard"));
  CommandResult scheduler_binds =
      As(kScheduler, {"create", "--raw", "/api/v1/namespaces/team/pods/plain/binding", "-f", "-"},
         Binding("plain", {{"tessera.dev/assignment", kAssignment}}).dump());
  ASSERT_TRUE(scheduler_binds.ok()) << scheduler_binds.err;
  json pod = json::parse(*Cp().KubectlOk({"get", "-n", "team", "pod/plain", "-o", "json"}));
  EXPECT_EQ(pod["spec"]["nodeName"], "n1");
  EXPECT_EQ(pod["metadata"]["annotations"]["tessera.dev/assignment"], kAssignment);

  // Once granted, nobody else changes or removes it; other edits still pass.
  EXPECT_FALSE(As("alice", {"annotate", "-n", "team", "pod/plain", "--overwrite",
                            "tessera.dev/assignment=other"})
                   .ok());
  EXPECT_FALSE(
      As("alice", {"annotate", "-n", "team", "pod/plain", "tessera.dev/assignment-"}).ok());
  EXPECT_TRUE(As("alice", {"label", "-n", "team", "pod/plain", "after=bound"}).ok());

  // A binding without annotations is not the policy's business.
  ASSERT_TRUE(As("alice", {"create", "-f", "-"}, PodJson("self-bound").dump()).ok());
  CommandResult plain_bind =
      As("alice", {"create", "--raw", "/api/v1/namespaces/team/pods/self-bound/binding", "-f", "-"},
         Binding("self-bound", nullptr).dump());
  EXPECT_TRUE(plain_bind.ok()) << plain_bind.err;
}

TEST(AgentDeploy, TheAgentsRbacIsWhatItUses) {
  InstallOnce();
  auto can = [](const std::string& verb, const std::string& resource) {
    CommandResult r = As(kAgent, {"auth", "can-i", verb, resource, "--all-namespaces"});
    return r.out.find("yes") == 0;
  };
  for (const auto& [verb, resource] :
       std::vector<std::pair<std::string, std::string>>{{"get", "nodes"},
                                                        {"list", "nodes"},
                                                        {"watch", "nodes"},
                                                        {"patch", "nodes"},
                                                        {"patch", "nodes/status"},
                                                        {"list", "pods"},
                                                        {"create", "events"}}) {
    EXPECT_TRUE(can(verb, resource)) << verb << " " << resource;
  }
  for (const auto& [verb, resource] :
       std::vector<std::pair<std::string, std::string>>{{"update", "nodes"},
                                                        {"delete", "nodes"},
                                                        {"create", "nodes"},
                                                        {"get", "pods"},
                                                        {"create", "pods"},
                                                        {"patch", "pods"},
                                                        {"create", "pods/binding"},
                                                        {"get", "secrets"},
                                                        {"patch", "events"},
                                                        {"update", "nodes/status"}}) {
    EXPECT_FALSE(can(verb, resource)) << verb << " " << resource;
  }
}

// A Node as a kubelet registers it.
void CreateNode(k8s::ApiClient& admin, const std::string& name) {
  ASSERT_TRUE(
      admin
          .Create("/api/v1/nodes",
                  {{"apiVersion", "v1"},
                   {"kind", "Node"},
                   {"metadata", {{"name", name}, {"labels", {{"kubernetes.io/hostname", name}}}}}})
          .ok());
  ASSERT_TRUE(admin
                  .Patch("/api/v1/nodes/" + name + "/status", k8s::PatchType::kMerge,
                         {{"status",
                           {{"capacity", {{"cpu", "8"}, {"memory", "32Gi"}, {"pods", "110"}}},
                            {"allocatable", {{"cpu", "8"}, {"memory", "32Gi"}, {"pods", "110"}}}}}})
                  .ok());
}

// The token a kubelet would give the agent's pod on `node`: bound to a pod that runs there.
std::string PodBoundToken(k8s::ApiClient& admin, const std::string& pod, const std::string& node) {
  json p = {{"apiVersion", "v1"},
            {"kind", "Pod"},
            {"metadata", {{"name", pod}, {"namespace", "tessera-system"}}},
            {"spec",
             {{"nodeName", node},
              {"serviceAccountName", "tessera-agent"},
              {"containers", {{{"name", "agent"}, {"image", "tessera:0.1.0"}}}}}}};
  absl::StatusOr<json> created = admin.Create("/api/v1/namespaces/tessera-system/pods", p);
  EXPECT_TRUE(created.ok()) << created.status();
  if (!created.ok()) return "";
  absl::StatusOr<json> token =
      admin.Create("/api/v1/namespaces/tessera-system/serviceaccounts/tessera-agent/token",
                   {{"apiVersion", "authentication.k8s.io/v1"},
                    {"kind", "TokenRequest"},
                    {"spec",
                     {{"expirationSeconds", 3600},
                      {"boundObjectRef",
                       {{"apiVersion", "v1"},
                        {"kind", "Pod"},
                        {"name", pod},
                        {"uid", (*created)["metadata"]["uid"]}}}}}});
  EXPECT_TRUE(token.ok()) << token.status();
  return token.ok() ? std::string((*token)["status"]["token"]) : "";
}

k8s::ClientConfig TokenConfig(const std::string& token) {
  k8s::ClientConfig c;
  c.server = Cp().server();
  std::ifstream ca(Cp().ca_file());
  c.ca_pem.assign(std::istreambuf_iterator<char>(ca), {});
  c.bearer_token = token;
  c.source = "test token";
  return c;
}

TEST(AgentDeploy, AnAgentWritesOnlyItsOwnNodeAndOnlyTesserasKeys) {
  InstallOnce();
  auto admin = Admin();
  CreateNode(*admin, "scope-a");
  CreateNode(*admin, "scope-b");
  auto agent = Client(TokenConfig(PodBoundToken(*admin, "agent-scope-a", "scope-a")));
  auto patch = [&](const std::string& node, const json& body, bool status = false) {
    return agent->Patch("/api/v1/nodes/" + node + (status ? "/status" : ""), k8s::PatchType::kMerge,
                        body);
  };
  const json label = {{"metadata", {{"labels", {{"tessera.dev/gpu-count", "2"}}}}}};
  EXPECT_TRUE(patch("scope-a", label).ok());
  EXPECT_TRUE(
      patch("scope-a", {{"metadata", {{"annotations", {{"tessera.dev/gpu-inventory", "{}"}}}}}})
          .ok());
  EXPECT_TRUE(
      patch("scope-a", {{"status", {{"capacity", {{"tessera.dev/gpu", "2"}}}}}}, true).ok());

  absl::StatusOr<json> other = patch("scope-b", label);
  ASSERT_FALSE(other.ok());
  EXPECT_THAT(other.status().message(),
              HasSubstr("the tessera agent may write only the Node its pod runs on (scope-a), not "
                        "scope-b"));
  absl::StatusOr<json> hostname =
      patch("scope-a", {{"metadata", {{"labels", {{"kubernetes.io/hostname", "x"}}}}}});
  ASSERT_FALSE(hostname.ok());
  EXPECT_THAT(hostname.status().message(), HasSubstr("may change only tessera.dev/ labels"));
  absl::StatusOr<json> annotation =
      patch("scope-a", {{"metadata", {{"annotations", {{"other.io/x", "y"}}}}}});
  ASSERT_FALSE(annotation.ok());
  EXPECT_THAT(annotation.status().message(), HasSubstr("may change only tessera.dev/ annotations"));
  absl::StatusOr<json> taint =
      patch("scope-a", {{"spec", {{"taints", {{{"key", "x"}, {"effect", "NoSchedule"}}}}}}});
  ASSERT_FALSE(taint.ok());
  EXPECT_THAT(taint.status().message(), HasSubstr("may not change a Node's spec"));
  absl::StatusOr<json> cpu =
      patch("scope-a", {{"status", {{"capacity", {{"cpu", "1000"}}}}}}, true);
  ASSERT_FALSE(cpu.ok());
  EXPECT_THAT(cpu.status().message(), HasSubstr("may change only tessera.dev/ resources"));
  // A token not bound to a pod on a node names no node: nothing may be written.
  absl::StatusOr<json> unbound_token =
      admin->Create("/api/v1/namespaces/tessera-system/serviceaccounts/tessera-agent/token",
                    {{"apiVersion", "authentication.k8s.io/v1"},
                     {"kind", "TokenRequest"},
                     {"spec", {{"expirationSeconds", 3600}}}});
  ASSERT_TRUE(unbound_token.ok());
  auto unbound = Client(TokenConfig((*unbound_token)["status"]["token"]));
  absl::StatusOr<json> nowhere =
      unbound->Patch("/api/v1/nodes/scope-a", k8s::PatchType::kMerge, label);
  ASSERT_FALSE(nowhere.ok());
  EXPECT_THAT(nowhere.status().message(), HasSubstr("(its token names none)"));
}

// DRA mode: the agent publishes its node's ResourceSlices and nobody else's
// (tessera-agent-resourceslice-scope, deploy/agent-dra-admission-policy.yaml).
json Slice(const std::string& name, const std::string& node) {
  return {{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "ResourceSlice"},
          {"metadata", {{"name", name}}},
          {"spec",
           {{"driver", "gpu.tessera.dev"},
            {"nodeName", node},
            {"pool", {{"name", node}, {"generation", 1}, {"resourceSliceCount", 1}}},
            {"devices", json::array()}}}};
}

TEST(AgentDeploy, AnAgentWritesOnlyItsOwnNodesResourceSlices) {
  InstallOnce();
  absl::StatusOr<std::string> applied =
      Cp().KubectlOk({"apply", "-f", Deploy("agent-dra-rbac.yaml"), "-f",
                      Deploy("agent-dra-admission-policy.yaml")});
  ASSERT_TRUE(applied.ok()) << applied.status();
  auto admin = Admin();
  CreateNode(*admin, "slices-a");
  CreateNode(*admin, "slices-b");
  auto agent = Client(TokenConfig(PodBoundToken(*admin, "agent-slices-a", "slices-a")));
  const std::string slices = "/apis/resource.k8s.io/v1/resourceslices";
  // The policy is enforced a moment after it is created: until then RBAC alone decides.
  absl::StatusOr<json> other;
  ASSERT_TRUE(WaitUntil(
      [&] {
        other = agent->Create(slices + "?dryRun=All", Slice("slices-b-gpu", "slices-b"));
        return !other.ok() && other.status().message().find("tessera-agent-resourceslice-scope") !=
                                  std::string::npos;
      },
      seconds(30)))
      << (other.ok() ? other->dump() : std::string(other.status().message()));
  EXPECT_THAT(other.status().message(),
              HasSubstr("the tessera agent on node slices-a may write only its own node's "
                        "ResourceSlices, not one of node slices-b (slices-b-gpu)"));

  // Its own: created, updated, deleted.
  absl::StatusOr<json> own = agent->Create(slices, Slice("slices-a-gpu", "slices-a"));
  ASSERT_TRUE(own.ok()) << own.status();
  (*own)["spec"]["pool"]["generation"] = 2;
  absl::StatusOr<json> updated = agent->Update(slices + "/slices-a-gpu", *own);
  ASSERT_TRUE(updated.ok()) << updated.status();
  EXPECT_TRUE(agent->Delete(slices + "/slices-a-gpu").ok());

  // Another node's slice (published by its own agent, here the admin) stays.
  absl::StatusOr<json> theirs = admin->Create(slices, Slice("slices-b-gpu", "slices-b"));
  ASSERT_TRUE(theirs.ok()) << theirs.status();
  (*theirs)["spec"]["pool"]["generation"] = 7;
  absl::StatusOr<json> changed = agent->Update(slices + "/slices-b-gpu", *theirs);
  ASSERT_FALSE(changed.ok());
  EXPECT_THAT(changed.status().message(), HasSubstr("not one of node slices-b (slices-b-gpu)"));
  absl::StatusOr<json> gone = agent->Delete(slices + "/slices-b-gpu");
  ASSERT_FALSE(gone.ok());
  EXPECT_THAT(gone.status().message(), HasSubstr("not one of node slices-b (slices-b-gpu)"));
  EXPECT_TRUE(admin->Get(slices + "/slices-b-gpu").ok());
  // A slice for all nodes is no agent's.
  json everywhere = Slice("everywhere-gpu", "x");
  everywhere["spec"].erase("nodeName");
  everywhere["spec"]["allNodes"] = true;
  absl::StatusOr<json> all = agent->Create(slices, everywhere);
  ASSERT_FALSE(all.ok());
  EXPECT_THAT(all.status().message(), HasSubstr("not one without spec.nodeName"));

  // A token not bound to a pod on a node names no node: no slice at all.
  absl::StatusOr<json> unbound_token =
      admin->Create("/api/v1/namespaces/tessera-system/serviceaccounts/tessera-agent/token",
                    {{"apiVersion", "authentication.k8s.io/v1"},
                     {"kind", "TokenRequest"},
                     {"spec", {{"expirationSeconds", 3600}}}});
  ASSERT_TRUE(unbound_token.ok());
  auto unbound = Client(TokenConfig((*unbound_token)["status"]["token"]));
  absl::StatusOr<json> nowhere = unbound->Create(slices, Slice("slices-a-gpu", "slices-a"));
  ASSERT_FALSE(nowhere.ok());
  EXPECT_THAT(nowhere.status().message(), HasSubstr("its token names no node"));
  EXPECT_TRUE(admin->Delete(slices + "/slices-b-gpu").ok());
}

// What an agent started by hand reads in `dir`: its token, a kubeconfig that uses it, and a
// description of one fake H100.
void WriteAgentFiles(const std::string& dir, const std::string& token) {
  std::ofstream(dir + "/token") << token;
  std::ofstream(dir + "/kubeconfig")
      << StrCat(R"(apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: ")",
                Cp().server(), R"(", certificate-authority: ")", Cp().ca_file(), R"("}
users:
- name: agent
  user: {tokenFile: ")",
                dir, R"(/token"}
contexts:
- name: agent
  context: {cluster: c, user: agent}
current-context: agent
)");
  std::ofstream(dir + "/gpus.json") << R"({"version": 1, "gpus": [
      {"index": 0, "uuid": "GPU-6f1c2a9e-0000-4000-8000-000000000000", "model": "H100-80GB",
       "memory_mib": 81559}]})";
}

TEST(AgentDeploy, TheAgentPublishesWithItsOwnTokenAlone) {
  InstallOnce();
  auto admin = Admin();
  CreateNode(*admin, "own-token");
  const std::string token = PodBoundToken(*admin, "agent-own-token", "own-token");
  const std::string dir =
      (std::filesystem::path(::testing::TempDir()) / "agent_own_token").string();
  std::filesystem::create_directories(dir);
  WriteAgentFiles(dir, token);
  absl::StatusOr<std::unique_ptr<ScopedProcess>> p = ScopedProcess::Start(
      {TESSERA_BINARY, "agent", "--kubeconfig", dir + "/kubeconfig", "--node-name", "own-token",
       "--gpus-file", dir + "/gpus.json", "--no-nri", "--rediscover-interval", "500ms"},
      dir + "/agent.log");
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(WaitUntil(
      [&] {
        absl::StatusOr<json> node = admin->Get("/api/v1/nodes/own-token");
        return node.ok() && (*node)["status"]["allocatable"].value("tessera.dev/gpu", "") == "1" &&
               (*node)["metadata"]["labels"].value("tessera.dev/gpu-model", "") == "H100-80GB" &&
               (*node)["metadata"]["annotations"].contains("tessera.dev/gpu-inventory");
      },
      seconds(30)))
      << (*p)->Log();
  EXPECT_THAT((*p)->Log(), ::testing::Not(HasSubstr("forbidden")));
  (*p)->Signal(SIGTERM);
  EXPECT_EQ((*p)->Wait(seconds(10)), 0) << (*p)->Log();
}

// `tessera agent --dra` with nothing but its pod-bound token, the DRA RBAC and the ResourceSlice
// policy installed: its node's pool is published (the policy lets its own slices through).
TEST(AgentDeploy, TheDraAgentPublishesItsSlicesWithItsOwnTokenAlone) {
  InstallOnce();
  ASSERT_TRUE(Cp().KubectlOk({"apply", "-f", Deploy("agent-dra-rbac.yaml"), "-f",
                              Deploy("agent-dra-admission-policy.yaml")})
                  .ok());
  auto admin = Admin();
  CreateNode(*admin, "own-slices");
  const std::string token = PodBoundToken(*admin, "agent-own-slices", "own-slices");
  const std::string dir =
      (std::filesystem::path(::testing::TempDir()) / "agent_own_slices").string();
  std::filesystem::remove_all(dir);
  for (const char* sub : {"kubelet/plugins_registry", "kubelet/plugins", "cdi", "claims", "pods"}) {
    std::filesystem::create_directories(dir + "/" + sub);
  }
  WriteAgentFiles(dir, token);
  absl::StatusOr<std::unique_ptr<ScopedProcess>> p = ScopedProcess::Start({TESSERA_BINARY,
                                                                           "agent",
                                                                           "--dra",
                                                                           "--kubeconfig",
                                                                           dir + "/kubeconfig",
                                                                           "--node-name",
                                                                           "own-slices",
                                                                           "--gpus-file",
                                                                           dir + "/gpus.json",
                                                                           "--no-nri",
                                                                           "--kubelet-dir",
                                                                           dir + "/kubelet",
                                                                           "--cdi-dir",
                                                                           dir + "/cdi",
                                                                           "--claims-dir",
                                                                           dir + "/claims",
                                                                           "--pods-dir",
                                                                           dir + "/pods",
                                                                           "--share-enforcement",
                                                                           "none",
                                                                           "--metrics-port",
                                                                           "-1"},
                                                                          dir + "/agent.log");
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(WaitUntil(
      [&] {
        absl::StatusOr<json> list = admin->Get(
            "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName%3Down-slices");
        return list.ok() && !(*list)["items"].empty() &&
               (*list)["items"][0]["spec"]["driver"] == "gpu.tessera.dev";
      },
      seconds(30)))
      << (*p)->Log();
  EXPECT_THAT((*p)->Log(), ::testing::Not(HasSubstr("forbidden")));
  EXPECT_THAT((*p)->Log(), ::testing::Not(HasSubstr("resourceslice-scope")));
  (*p)->Signal(SIGTERM);
  EXPECT_EQ((*p)->Wait(seconds(10)), 0) << (*p)->Log();
}

}  // namespace
}  // namespace tessera::e2e
