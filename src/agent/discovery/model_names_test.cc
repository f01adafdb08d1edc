#include "agent/discovery/model_names.h"

#include "core/model/mig.h"
#include "core/model/profiles.h"
#include "gtest/gtest.h"

namespace tessera::agent {
namespace {

TEST(ModelNames, ProductNamesNvidiaSmiPrints) {
  EXPECT_EQ(ModelFromProductName("NVIDIA A100-SXM4-80GB"), "A100-80GB");
  EXPECT_EQ(ModelFromProductName("NVIDIA A100-SXM4-40GB"), "A100-40GB");
  EXPECT_EQ(ModelFromProductName("NVIDIA A100 80GB PCIe"), "A100-PCIE-80GB");
  EXPECT_EQ(ModelFromProductName("NVIDIA H100 80GB HBM3"), "H100-80GB");
  EXPECT_EQ(ModelFromProductName("NVIDIA H100 PCIe"), "H100-PCIe");
  EXPECT_EQ(ModelFromProductName("NVIDIA H100 NVL"), "H100-NVL");
  EXPECT_EQ(ModelFromProductName("NVIDIA H200"), "H200-141GB");
  EXPECT_EQ(ModelFromProductName("NVIDIA H200 NVL"), "H200-NVL");
  EXPECT_EQ(ModelFromProductName("NVIDIA GH200 480GB"), "GH200-480GB");
  EXPECT_EQ(ModelFromProductName("NVIDIA GB200"), "GB200");
  EXPECT_EQ(ModelFromProductName("NVIDIA B200"), "B200");
  EXPECT_EQ(ModelFromProductName("NVIDIA L40S"), "L40S-48GB");
  EXPECT_EQ(ModelFromProductName("NVIDIA L4"), "L4");
  EXPECT_EQ(ModelFromProductName("Tesla T4"), "T4");
  EXPECT_EQ(ModelFromProductName("Tesla V100-SXM2-32GB"), "V100-32GB");
  EXPECT_EQ(ModelFromProductName("NVIDIA GeForce RTX 4090"), "GeForce-RTX-4090");
  EXPECT_EQ(ModelFromProductName(""), "unknown");
}

TEST(ModelNames, KnownNamesAreTheEngines) {
  // Every name tessera knows facts for is reachable, and MIG tables find the same GPU.
  for (const char* product : {"NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3", "NVIDIA H200"}) {
    const std::string model = ModelFromProductName(product);
    EXPECT_GT(core::KnownGpuMemoryMiB(model), 0) << model;
    EXPECT_EQ(core::FindMigModel(model), core::FindMigModel(product)) << model;
  }
}

TEST(ModelNames, LabelSafe) {
  EXPECT_EQ(LabelSafe("H100 80GB (SXM)"), "H100-80GB--SXM");
  EXPECT_EQ(LabelSafe("-x-"), "x");
  EXPECT_EQ(LabelSafe(std::string(80, 'a')).size(), 63u);
}

}  // namespace
}  // namespace tessera::agent
