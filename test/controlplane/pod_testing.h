// Pods on test nodes, for e2e tests: a busybox pod whose script writes what the test checks to
// /dev/termination-log, polling, and reading the message back from the Pod's status (no traffic
// from the API server to a kubelet is needed).
//
//   json pod = TestPod("hello", ns, "node-1", "echo hi > /dev/termination-log");
//   ASSERT_TRUE(cp.KubectlOk({"create", "-f", "-"}, pod.dump()).ok());
//   json done = WaitForPod(cp, ns, "hello", PodFinished);
//   EXPECT_EQ(TerminationMessage(done), "hi\n");
#pragma once

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "controlplane/controlplane.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tessera::e2e {

// A pod that runs `script` with /bin/sh in the test image (ControlPlane::kTestImage, never
// pulled), once (restartPolicy Never). An empty node leaves the choice to a scheduler.
inline nlohmann::json TestPod(const std::string& name, const std::string& ns,
                              const std::string& node, const std::string& script) {
  nlohmann::json pod = {{"apiVersion", "v1"},
                        {"kind", "Pod"},
                        {"metadata", {{"name", name}, {"namespace", ns}}},
                        {"spec",
                         {{"restartPolicy", "Never"},
                          {"automountServiceAccountToken", false},
                          {"terminationGracePeriodSeconds", 1},
                          {"containers",
                           {{{"name", "main"},
                             {"image", ControlPlane::kTestImage},
                             {"imagePullPolicy", "Never"},
                             {"command", {"/bin/sh", "-c", script}}}}}}}};
  if (!node.empty()) pod["spec"]["nodeName"] = node;
  return pod;
}

// The object `kubectl get <what> -o json` prints; null (and a test failure) if it fails.
inline nlohmann::json GetJson(const ControlPlane& cp, const std::vector<std::string>& what) {
  std::vector<std::string> args = {"get"};
  args.insert(args.end(), what.begin(), what.end());
  args.insert(args.end(), {"-o", "json"});
  auto out = cp.KubectlOk(args);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? nlohmann::json::parse(*out) : nlohmann::json();
}

inline bool PodFinished(const nlohmann::json& pod) {
  std::string phase = pod["status"].value("phase", "");
  return phase == "Succeeded" || phase == "Failed";
}

// Polls the pod until pred(pod) or the timeout; returns the last state read.
template <typename Pred>
nlohmann::json WaitForPod(const ControlPlane& cp, const std::string& ns, const std::string& name,
                          Pred pred, std::chrono::seconds timeout = std::chrono::seconds(90)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  nlohmann::json pod;
  while (true) {
    CommandResult r = cp.Kubectl({"get", "pod", name, "-n", ns, "-o", "json"});
    if (r.ok()) {
      pod = nlohmann::json::parse(r.out);
      if (pred(pod)) return pod;
    }
    if (std::chrono::steady_clock::now() > deadline) return pod;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
}

// status.containerStatuses[0].state.terminated.message, or "" if it has not terminated.
inline std::string TerminationMessage(const nlohmann::json& pod) {
  const auto& statuses = pod["status"].value("containerStatuses", nlohmann::json::array());
  if (statuses.empty()) return "";
  return statuses[0]["state"].value("terminated", nlohmann::json::object()).value("message", "");
}

// The reason the first container waits (e.g. "ErrImageNeverPull"), or "".
inline std::string WaitingReason(const nlohmann::json& pod) {
  const auto& statuses = pod["status"].value("containerStatuses", nlohmann::json::array());
  if (statuses.empty()) return "";
  return statuses[0]["state"].value("waiting", nlohmann::json::object()).value("reason", "");
}

}  // namespace tessera::e2e
