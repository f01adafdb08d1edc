// main() of every tessera_e2e_test binary: one control plane (and its nodes) for the whole binary.
//
//   test_binary [gtest flags] [--with-scheduler] [--with-controller-manager]
//               [--with-service-accounts] [--with-workloads] [--with-job-workloads]
//               [--nodes N] [--node NAME] [--gpus FILE] [--label KEY=VALUE]
//
// tessera_e2e_test(... WITH_SCHEDULER / WITH_CONTROLLER_MANAGER / WITH_WORKLOADS /
// WITH_JOB_WORKLOADS / NODES / NODE_ARGS) passes these flags; the node options are cluster.sh's (see ParseNodeArgs).
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "controlplane/controlplane.h"
#include "gtest/gtest.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);  // removes the gtest flags it knows
  tessera::e2e::ControlPlaneOptions options;
  std::vector<std::string> node_args;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--with-scheduler") == 0) {
      options.with_scheduler = true;
    } else if (std::strcmp(argv[i], "--with-controller-manager") == 0) {
      options.with_controller_manager = true;
    } else if (std::strcmp(argv[i], "--with-service-accounts") == 0) {
      options.with_service_accounts = true;
      options.with_controller_manager = true;
    } else if (std::strcmp(argv[i], "--with-workloads") == 0) {
      options.with_workloads = true;
    } else if (std::strcmp(argv[i], "--with-job-workloads") == 0) {
      options.with_job_workloads = true;
      options.with_workloads = true;
      options.with_controller_manager = true;
    } else {
      node_args.emplace_back(argv[i]);
    }
  }
  auto nodes = tessera::e2e::ParseNodeArgs(node_args);
  if (!nodes.ok()) {
    std::cerr << argv[0] << ": " << nodes.status().message()
              << " (expected gtest flags, --with-scheduler, --with-controller-manager, "
                 "--with-service-accounts, --with-workloads, --with-job-workloads,"
                 " --nodes N,"
                 " --node NAME, --gpus FILE, --label KEY=VALUE)\n";
    return 2;
  }
  options.nodes = *std::move(nodes);
  ::testing::AddGlobalTestEnvironment(new tessera::e2e::ControlPlaneEnvironment(options));
  return RUN_ALL_TESTS();
}
