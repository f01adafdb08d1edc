// NRI's messages against the bytes containerd's own NRI module writes (testdata/golden.txt, made by
// test/nri/golden with github.com/containerd/nri v0.12.3, the version containerd v2.4.2 uses):
// what the plugin sends must be those bytes exactly, and what the runtime sends must decode to the
// values it was made from.
#include "agent/nri/nri_api.h"

#include <fstream>
#include <map>

#include "agent/nri/ttrpc.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::agent::nri {
namespace {

std::string Unhex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

const std::map<std::string, std::string>& Golden() {
  static const std::map<std::string, std::string> golden = [] {
    std::map<std::string, std::string> m;
    std::ifstream in(std::string(TESSERA_SOURCE_DIR) + "/src/agent/nri/testdata/golden.txt");
    std::string line;
    while (std::getline(in, line)) {
      const size_t space = line.find(' ');
      if (space == std::string::npos) continue;
      m[line.substr(0, space)] = Unhex(line.substr(space + 1));
    }
    return m;
  }();
  return golden;
}

std::string G(const std::string& name) {
  auto it = Golden().find(name);
  EXPECT_NE(it, Golden().end()) << name << " is not in testdata/golden.txt";
  return it == Golden().end() ? "" : it->second;
}

constexpr char kAssignment[] =
    R"({"version":1,"node":"n1","gpus":[{"index":3,"uuid":"GPU-6f1c2a9e-0000-4000-8000-000000000003","memory_mib":4096,"compute_milli":0,"exclusive":false}]})";

PodSandbox Pod() {
  PodSandbox p;
  p.id = "8f2a";
  p.name = "share-0";
  p.uid = "0f5e3a8c-5f2b-4c1e-9d7a-2b6c8e1f4a3d";
  p.ns = "team-a";
  p.labels = {{"app", "infer"}};
  p.annotations = {{"tessera.dev/assignment", kAssignment}};
  return p;
}

Container Ctr() {
  Container c;
  c.id = "c0ffee";
  c.pod_sandbox_id = "8f2a";
  c.name = "main";
  c.state = 1;  // CONTAINER_CREATED
  c.env = {"PATH=/usr/bin", "NVIDIA_VISIBLE_DEVICES=all"};
  return c;
}

ContainerAdjustment Adjustment() {
  ContainerAdjustment a;
  a.env = {{"NVIDIA_VISIBLE_DEVICES", "GPU-6f1c2a9e-0000-4000-8000-000000000003"},
           {"TESSERA_GPU_MEMORY_LIMIT_MIB", "4096"}};
  a.devices = {LinuxDevice{"/dev/nvidia3", "c", 195, 3, 0666u, std::nullopt, std::nullopt},
               LinuxDevice{"/dev/nvidiactl", "c", 195, 255, 0666u, std::nullopt, std::nullopt}};
  a.mounts = {Mount{"/run/tessera/assignment.json",
                    "bind",
                    "/run/tessera/pods/0f5e3a8c-5f2b-4c1e-9d7a-2b6c8e1f4a3d/assignment.json",
                    {"bind", "ro", "nosuid", "nodev"}}};
  return a;
}

TEST(NriApi, WhatThePluginSendsIsWhatGoWrites) {
  EXPECT_EQ(EncodeRegisterPluginRequest("tessera", "50", "v0.12.3"), G("RegisterPluginRequest"));
  EXPECT_EQ(EncodeConfigureResponse(EventBit(kCreateContainer) | EventBit(kRemovePodSandbox)),
            G("ConfigureResponse"));
  EXPECT_EQ(EncodeSynchronizeResponse(true), G("SynchronizeResponse.more"));
  EXPECT_EQ(EncodeSynchronizeResponse(false), G("SynchronizeResponse"));
  EXPECT_EQ(EncodeContainerAdjustment(Adjustment()), G("ContainerAdjustment"));
  EXPECT_EQ(EncodeCreateContainerResponse(Adjustment()), G("CreateContainerResponse"));
  ContainerAdjustment cdi;
  cdi.cdi_devices = {"nvidia.com/gpu=GPU-6f1c2a9e-0000-4000-8000-000000000003"};
  cdi.env = {{"NVIDIA_VISIBLE_DEVICES", "GPU-6f1c2a9e-0000-4000-8000-000000000003"}};
  EXPECT_EQ(EncodeContainerAdjustment(cdi), G("ContainerAdjustment.cdi"));
  EXPECT_EQ(EncodeCreateContainerResponse(ContainerAdjustment{}),
            G("CreateContainerResponse.empty"));
  EXPECT_EQ(std::string(), G("Empty"));
  ttrpc::Request r{"nri.pkg.api.v1alpha1.Plugin",
                   "CreateContainer",
                   std::string("\x01\x02\x03", 3),
                   2'000'000'000,
                   {{"k", "v"}}};
  EXPECT_EQ(ttrpc::EncodeRequest(r), G("ttrpc.Request"));
}

TEST(NriApi, WhatTheRuntimeSendsDecodes) {
  absl::StatusOr<ConfigureRequest> c = DecodeConfigureRequest(G("ConfigureRequest"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->runtime_name, "containerd");
  EXPECT_EQ(c->runtime_version, "v2.4.2");
  EXPECT_EQ(c->registration_timeout_ms, 5000);
  EXPECT_EQ(c->request_timeout_ms, 2000);
  EXPECT_EQ(c->nri_version, "v0.12.3");

  for (const char* name :
       {"CreateContainerRequest", "RemovePodSandboxRequest", "StateChangeEvent"}) {
    absl::StatusOr<PodContainerRequest> r =
        DecodePodContainerRequest(G(name), std::string(name) == "StateChangeEvent");
    ASSERT_TRUE(r.ok()) << name << ": " << r.status();
    EXPECT_EQ(r->pod.id, "8f2a") << name;
    EXPECT_EQ(r->pod.name, "share-0");
    EXPECT_EQ(r->pod.uid, "0f5e3a8c-5f2b-4c1e-9d7a-2b6c8e1f4a3d");
    EXPECT_EQ(r->pod.ns, "team-a");
    EXPECT_EQ(r->pod.labels, (std::map<std::string, std::string>{{"app", "infer"}}));
    EXPECT_EQ(r->pod.annotations.at("tessera.dev/assignment"), kAssignment);
    EXPECT_EQ(r->container.has_value(), std::string(name) == "CreateContainerRequest") << name;
  }
  absl::StatusOr<PodContainerRequest> create =
      DecodePodContainerRequest(G("CreateContainerRequest"));
  ASSERT_TRUE(create.ok());
  EXPECT_EQ(create->container->id, "c0ffee");
  EXPECT_EQ(create->container->pod_sandbox_id, "8f2a");
  EXPECT_EQ(create->container->name, "main");
  EXPECT_EQ(create->container->state, 1);
  EXPECT_EQ(create->container->env,
            (std::vector<std::string>{"PATH=/usr/bin", "NVIDIA_VISIBLE_DEVICES=all"}));

  absl::StatusOr<SynchronizeRequest> s = DecodeSynchronizeRequest(G("SynchronizeRequest"));
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->pods.size(), 1u);
  ASSERT_EQ(s->containers.size(), 1u);
  EXPECT_TRUE(s->more);
  EXPECT_EQ(s->containers[0].name, "main");

  absl::StatusOr<ContainerAdjustment> a = DecodeContainerAdjustment(G("ContainerAdjustment"));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->env, Adjustment().env);
  EXPECT_EQ(a->devices, Adjustment().devices);
  EXPECT_EQ(a->mounts, Adjustment().mounts);
}

TEST(NriApi, TheRuntimeSideEncodersMatchGoToo) {
  // Used by the tests that play the runtime: they must send what containerd sends.
  EXPECT_EQ(EncodeCreateContainerRequest(Pod(), Ctr()), G("CreateContainerRequest"));
  ConfigureRequest c{"", "containerd", "v2.4.2", "v0.12.3", 5000, 2000};
  EXPECT_EQ(EncodeConfigureRequest(c), G("ConfigureRequest"));
  SynchronizeRequest s{{Pod()}, {Ctr()}, true};
  EXPECT_EQ(EncodeSynchronizeRequest(s), G("SynchronizeRequest"));
}

TEST(NriApi, TruncatedMessagesAreErrorsNotCrashes) {
  const std::string whole = G("CreateContainerRequest");
  for (size_t n = 1; n < whole.size(); n += 17) {
    absl::StatusOr<PodContainerRequest> r = DecodePodContainerRequest(whole.substr(0, n));
    EXPECT_FALSE(r.ok()) << n;
  }
}

}  // namespace
}  // namespace tessera::agent::nri
