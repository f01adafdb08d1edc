// main() of every tessera_e2e_test binary: one control plane for the whole binary.
//
//   test_binary [gtest flags] [--with-scheduler] [--with-controller-manager]
//
// tessera_e2e_test(... WITH_SCHEDULER / WITH_CONTROLLER_MANAGER) passes these flags.
#include <cstring>
#include <iostream>

#include "controlplane/controlplane.h"
#include "gtest/gtest.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);  // removes the gtest flags it knows
  tessera::e2e::ControlPlaneOptions options;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--with-scheduler") == 0) {
      options.with_scheduler = true;
    } else if (std::strcmp(argv[i], "--with-controller-manager") == 0) {
      options.with_controller_manager = true;
    } else {
      std::cerr << argv[0] << ": unknown argument " << argv[i]
                << " (expected gtest flags, --with-scheduler, --with-controller-manager)\n";
      return 2;
    }
  }
  ::testing::AddGlobalTestEnvironment(new tessera::e2e::ControlPlaneEnvironment(options));
  return RUN_ALL_TESTS();
}
