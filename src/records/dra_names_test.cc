#include "records/dra_names.h"

#include "gtest/gtest.h"

namespace tessera::records::dra {
namespace {

TEST(DraNames, DevicesAreNamedByTheirGpu) {
  EXPECT_EQ(MigDeviceName(1, "1g.10gb+me", 3), "gpu-1-mig-1g-10gb-me-3");
  EXPECT_EQ(GpuDeviceName(7), "gpu-7");
  EXPECT_EQ(CounterSetName(7), "gpu-7");
}

TEST(DraNames, ANameSaysItsGpuAndWhetherItIsAllOfIt) {
  std::optional<DeviceNameParts> p = ParseDeviceName(GpuDeviceName(12));
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->gpu_index, 12);
  EXPECT_TRUE(p->whole);
  p = ParseDeviceName(MigDeviceName(3, "1g.10gb", 2));
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->gpu_index, 3);
  EXPECT_FALSE(p->whole);
  for (const char* other :
       {"gpu", "gpu-", "gpu-x", "gpu-1234", "gpu-3x", "gpu-3-mag-1", "nic-0", "GPU-3"}) {
    EXPECT_FALSE(ParseDeviceName(other).has_value()) << other;
  }
}

}  // namespace
}  // namespace tessera::records::dra
