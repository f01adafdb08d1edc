#include "k8s/dra/cache.h"

#include <gtest/gtest.h>

#include "k8s/testing/dra_objects.h"

namespace tessera::k8s::dra {
namespace {

using testing::SliceObject;

TEST(DraCache, DevicesByGpuIndexOnTheSlicesNode) {
  DraCache cache("gpu.tessera.dev");
  std::vector<std::string> changed =
      cache.OnSlice(false, DecodeSlice(SliceObject("node-a").Gpus(4).Without(2).Json()));
  EXPECT_EQ(changed, std::vector<std::string>{"node-a"});
  const NodeDevices* d = cache.Devices("node-a");
  ASSERT_NE(d, nullptr);
  ASSERT_EQ(d->gpus.size(), 4u);
  EXPECT_EQ(d->gpus[1].device->name, "gpu-1");
  EXPECT_EQ(d->gpus[2].device, nullptr);  // not published
  EXPECT_NE(d->Find("node-a", "gpu-3"), nullptr);
  EXPECT_EQ(cache.Devices("node-b"), nullptr);
}

TEST(DraCache, OtherDriversAreIgnored) {
  DraCache cache("gpu.tessera.dev");
  const uint64_t g = cache.generation();
  EXPECT_TRUE(
      cache.OnSlice(false, DecodeSlice(SliceObject("node-a", "nic.example.com").Gpus(2).Json()))
          .empty());
  EXPECT_EQ(cache.generation(), g);
  EXPECT_EQ(cache.Devices("node-a"), nullptr);
}

TEST(DraCache, OnlyTheNewestCompleteGenerationCounts) {
  DraCache cache("gpu.tessera.dev");
  // Generation 2 is announced in two slices; while only one is there, generation 1 is not used
  // either (the pool is being rewritten) and the pool's problem says why.
  cache.OnSlice(false, DecodeSlice(SliceObject("node-a").Gpus(2).Name("old").Json()));
  ASSERT_NE(cache.Devices("node-a"), nullptr);
  nlohmann::json first = SliceObject("node-a").Gpus(8).Generation(2).Name("new-0").Json();
  first["spec"]["pool"]["resourceSliceCount"] = 2;
  cache.OnSlice(false, DecodeSlice(first));
  EXPECT_EQ(cache.Devices("node-a"), nullptr);
  ASSERT_EQ(cache.pool_problems().count("node-a"), 1u);
  EXPECT_NE(cache.pool_problems().at("node-a").find("1 of 2 slices of generation 2"),
            std::string::npos);
  nlohmann::json second = SliceObject("node-a").Gpus(8).Generation(2).Name("new-1").Json();
  second["spec"]["pool"]["resourceSliceCount"] = 2;
  // gpu-0..3 in the first, gpu-4..7 in the second.
  auto& d1 = first["spec"]["devices"];
  d1.erase(d1.begin() + 4, d1.end());
  auto& d2 = second["spec"]["devices"];
  d2.erase(d2.begin(), d2.begin() + 4);
  cache.OnSlice(false, DecodeSlice(first));
  cache.OnSlice(false, DecodeSlice(second));
  const NodeDevices* d = cache.Devices("node-a");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->gpus.size(), 8u);
  for (const NodeDevices::Gpu& g : d->gpus) EXPECT_NE(g.device, nullptr);
  cache.OnSlice(true, DecodeSlice(second));
  EXPECT_EQ(cache.Devices("node-a"), nullptr);  // incomplete again
}

TEST(DraCache, MigPartitionsStandForTheirGpu) {
  Device d;
  d.name = "gpu-3-mig-1g10gb-2";
  bool whole = true;
  EXPECT_EQ(GpuIndexOf(d, "gpu.tessera.dev", &whole), 3);
  EXPECT_FALSE(whole);
  d.name = "gpu-3";
  EXPECT_EQ(GpuIndexOf(d, "gpu.tessera.dev", &whole), 3);
  EXPECT_TRUE(whole);
  d.name = "nic-0";
  EXPECT_EQ(GpuIndexOf(d, "gpu.tessera.dev"), -1);
}

}  // namespace
}  // namespace tessera::k8s::dra
