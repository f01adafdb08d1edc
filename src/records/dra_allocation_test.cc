#include "records/dra_allocation.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "records/dra_names.h"

namespace tessera::records::dra {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;

TEST(DraAllocation, AClaimsStatusAsBothSidesReadIt) {
  const json status = json::parse(R"({
    "allocation": {
      "devices": {
        "results": [
          {"request": "gpu", "driver": "gpu.tessera.dev", "pool": "node-a", "device": "gpu-0",
           "shareID": "5a1e0000-0000-4000-8000-000000000001",
           "consumedCapacity": {"memory": "4Gi", "gpu.tessera.dev/compute": "25"}},
          {"request": "nic", "driver": "nic.example.com", "pool": "node-a", "device": "nic-1",
           "future": "ignored"}
        ],
        "config": [{"source": "FromClaim", "requests": ["gpu"],
                    "opaque": {"driver": "gpu.tessera.dev", "parameters": {}}}]
      },
      "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}]}
    },
    "reservedFor": [{"resource": "pods", "name": "p", "uid": "u1"}]
  })");
  const ClaimStatus s = DecodeClaimStatus(status);
  EXPECT_EQ(s.error, "");
  ASSERT_TRUE(s.allocation.has_value());
  const Allocation& a = *s.allocation;
  EXPECT_EQ(a.node, "node-a");
  EXPECT_EQ(a.raw, status["allocation"]);
  ASSERT_EQ(a.results.size(), 2u);
  const AllocatedDevice& gpu = a.results[0];
  EXPECT_EQ(gpu.request, "gpu");
  EXPECT_EQ(gpu.driver, kDriverName);
  EXPECT_EQ(gpu.pool, "node-a");
  EXPECT_EQ(gpu.device, "gpu-0");
  EXPECT_EQ(gpu.share_id, "5a1e0000-0000-4000-8000-000000000001");
  // Either spelling of a capacity of the driver is the same capacity.
  EXPECT_EQ(gpu.Consumed(kCapMemory, kDriverName), (int64_t{4} << 30) * 1000);
  EXPECT_EQ(gpu.Consumed(kCapCompute, kDriverName), 25'000);
  EXPECT_EQ(gpu.Consumed(kCapCompute, "other.example.com"), std::nullopt);
  EXPECT_EQ(MemoryMib(*gpu.Consumed(kCapMemory, kDriverName)), 4096);
  EXPECT_EQ(a.results[1].device, "nic-1");
  EXPECT_TRUE(a.results[1].consumed.empty());
  ASSERT_EQ(a.config.size(), 1u);
  EXPECT_EQ(a.config[0], (AllocationConfig{"FromClaim", "gpu.tessera.dev", {"gpu"}}));
  EXPECT_THAT(s.reserved_for, ElementsAre(ConsumerRef{"", "pods", "p", "u1"}));
}

TEST(DraAllocation, NotAllocatedAndUnreadableValues) {
  EXPECT_FALSE(DecodeClaimStatus(json::object()).allocation.has_value());
  EXPECT_FALSE(DecodeClaimStatus(json()).allocation.has_value());
  EXPECT_FALSE(DecodeClaimStatus(json::parse(R"({"allocation": "x"})")).allocation.has_value());

  const ClaimStatus s = DecodeClaimStatus(json::parse(R"({"allocation": {"devices": {"results": [
      {"device": "gpu-0", "consumedCapacity": {"memory": "4Gi"}},
      {"device": "gpu-1", "consumedCapacity": {"memory": "lots", "compute": "25"}}]}}})"));
  ASSERT_TRUE(s.allocation.has_value());
  ASSERT_EQ(s.allocation->results.size(), 2u);
  EXPECT_EQ(s.allocation->results[0].error, "");
  const AllocatedDevice& bad = s.allocation->results[1];
  EXPECT_THAT(bad.error, ::testing::StartsWith("consumedCapacity.memory \"lots\": "));
  EXPECT_EQ(bad.Consumed(kCapMemory, kDriverName), std::nullopt);  // left out, never guessed
  EXPECT_EQ(bad.Consumed(kCapCompute, kDriverName), 25'000);
  EXPECT_THAT(s.error,
              ::testing::StartsWith(
                  "status.allocation.devices.results[1].consumedCapacity.memory \"lots\""));
}

TEST(DraAllocation, Quantities) {
  EXPECT_EQ(*ParseMilli("4Gi"), int64_t{4} * 1024 * 1024 * 1024 * 1000);
  EXPECT_EQ(FormatMilli(*ParseMilli("4Gi")), "4Gi");
  EXPECT_EQ(MemoryMib(*ParseMilli("1Mi")), 1);
  EXPECT_EQ(MemoryMib(*ParseMilli("1Mi") + 1), 2);  // rounded up: a share never gets less
  EXPECT_EQ(MemoryMib(0), 0);
  EXPECT_EQ(LocalCapacityName("gpu.tessera.dev/memory", kDriverName), "memory");
  EXPECT_EQ(LocalCapacityName("memory", kDriverName), "memory");
  EXPECT_EQ(LocalCapacityName("other.example.com/memory", kDriverName), "other.example.com/memory");
}

}  // namespace
}  // namespace tessera::records::dra
