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
#include <map>
#include <sstream>
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

// Polls pred() every `period` until it holds or `timeout` passes; returns its last answer.
template <typename Pred>
bool WaitUntil(Pred pred, std::chrono::milliseconds timeout,
               std::chrono::milliseconds period = std::chrono::milliseconds(250)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(period);
  }
  return pred();
}

// Waits until the namespace holds `count` pods and all have finished (Succeeded or Failed), with
// a test failure saying how far it got if not; returns the pods by name. Each poll asks for names
// and phases only; every pod as JSON is read once, at the end, in one list.
inline std::map<std::string, nlohmann::json> WaitAllPodsFinished(const ControlPlane& cp,
                                                                 const std::string& ns,
                                                                 size_t count,
                                                                 std::chrono::seconds timeout) {
  std::string last;
  const bool all = WaitUntil(
      [&] {
        CommandResult r = cp.Kubectl(
            {"get", "pods", "-n", ns, "-o",
             "jsonpath={range .items[*]}{.metadata.name} {.status.phase}{\"\\n\"}{end}"});
        if (!r.ok()) {
          last = "kubectl get pods (exit " + std::to_string(r.exit_code) + "): " + r.err;
          return false;
        }
        size_t pods = 0, finished = 0;
        std::istringstream lines(r.out);
        for (std::string line; std::getline(lines, line);) {
          if (line.empty()) continue;
          ++pods;
          finished += line.ends_with(" Succeeded") || line.ends_with(" Failed") ? 1 : 0;
        }
        last = std::to_string(pods) + " pods, " + std::to_string(finished) + " finished";
        return pods == count && finished == count;
      },
      timeout);
  EXPECT_TRUE(all) << "not all " << count << " pods finished: " << last;
  std::map<std::string, nlohmann::json> out;
  nlohmann::json list = GetJson(cp, {"pods", "-n", ns});
  for (const nlohmann::json& pod : list.value("items", nlohmann::json::array())) {
    out[pod["metadata"]["name"].get<std::string>()] = pod;
  }
  return out;
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
