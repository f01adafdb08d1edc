#include "shim/tracker.h"

#include "gtest/gtest.h"

namespace tessera::shim {
namespace {

CUcontext Ctx(uintptr_t v) { return reinterpret_cast<CUcontext>(v); }

TEST(ArrayBytesTest, SizesByFormatChannelsAndLayout) {
  CUDA_ARRAY_DESCRIPTOR d2{};
  d2.Width = 1000;
  d2.Height = 100;
  d2.Format = CU_AD_FORMAT_FLOAT;
  d2.NumChannels = 4;
  // 16000-byte rows rounded to 512 (16384) x 100 rows, rounded to 4 KiB.
  EXPECT_EQ(ArrayBytes(d2), 16384u * 100);

  CUDA_ARRAY3D_DESCRIPTOR d3{};
  d3.Width = 64;
  d3.Height = 64;
  d3.Depth = 8;
  d3.Format = CU_AD_FORMAT_UNSIGNED_INT8;
  d3.NumChannels = 1;
  EXPECT_EQ(ArrayBytes(d3, 1), 512u * 64 * 8);

  // A 1D array of halves.
  CUDA_ARRAY3D_DESCRIPTOR d1{};
  d1.Width = 10;
  d1.Format = CU_AD_FORMAT_HALF;
  d1.NumChannels = 2;
  EXPECT_EQ(ArrayBytes(d1, 1), 4096u);

  // Mipmaps add their levels: 256x256 down to 1x1, 9 levels.
  CUDA_ARRAY3D_DESCRIPTOR mip{};
  mip.Width = 256;
  mip.Height = 256;
  mip.Format = CU_AD_FORMAT_UNSIGNED_INT32;
  mip.NumChannels = 1;
  uint64_t expected = 0;
  for (uint64_t w = 256; w >= 1; w /= 2) expected += ((w * 4 + 511) / 512 * 512) * w;
  expected = (expected + 4095) / 4096 * 4096;
  EXPECT_EQ(ArrayBytes(mip, 9), expected);
  EXPECT_EQ(ArrayBytes(mip, 20), expected);  // stops at 1x1

  // Layered arrays keep their layers at every level.
  CUDA_ARRAY3D_DESCRIPTOR layered = d3;
  layered.Flags = CUDA_ARRAY3D_LAYERED;
  EXPECT_EQ(ArrayBytes(layered, 2), 512u * 64 * 8 + 512u * 32 * 8);

  // Sparse and deferred-mapping arrays own no memory.
  CUDA_ARRAY3D_DESCRIPTOR sparse = d3;
  sparse.Flags = CUDA_ARRAY3D_SPARSE;
  EXPECT_EQ(ArrayBytes(sparse, 1), 0u);
  sparse.Flags = CUDA_ARRAY3D_DEFERRED_MAPPING;
  EXPECT_EQ(ArrayBytes(sparse, 1), 0u);
}

TEST(TrackerTest, LinearAllocationsAndContexts) {
  Tracker t;
  t.Add(0x1000, Allocation{100, 0, Ctx(1), AllocKind::kLinear});
  t.Add(0x2000, Allocation{200, 0, Ctx(2), AllocKind::kManaged});
  t.Add(0x3000, Allocation{300, 1, Ctx(1), AllocKind::kArray});
  EXPECT_EQ(t.LinearBytes(0), 300u);
  auto a = t.Take(0x2000);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->bytes, 200u);
  EXPECT_FALSE(t.Take(0x2000).has_value());
  auto dropped = t.TakeContext(Ctx(1));
  EXPECT_EQ(dropped.size(), 2u);
  EXPECT_EQ(t.allocation_count(), 0u);
}

TEST(TrackerTest, PhysicalMemoryLivesUntilLastReferenceAndMapping) {
  Tracker t;
  t.AddPhysical(7, 2 << 20, 0);
  t.Map(0x10000000, 2 << 20, 7);
  EXPECT_EQ(t.HandleAt(0x10000000 + 5), std::optional<CUmemGenericAllocationHandle>(7));
  EXPECT_FALSE(t.HandleAt(0x10000000 + (2 << 20)).has_value());
  // Released while mapped (the NCCL pattern): still there.
  EXPECT_FALSE(t.ReleasePhysical(7).has_value());
  EXPECT_EQ(t.PhysicalBytes(0), 2u << 20);
  // Retained through its address, released again: still mapped.
  t.RetainPhysical(7);
  EXPECT_FALSE(t.ReleasePhysical(7).has_value());
  auto freed = t.Unmap(0x10000000, 2 << 20);
  ASSERT_EQ(freed.size(), 1u);
  EXPECT_EQ(freed[0].bytes, 2u << 20);
  EXPECT_EQ(t.PhysicalBytes(0), 0u);
}

TEST(TrackerTest, UnmapCoversSeveralMappingsAndIgnoresUnknownHandles) {
  Tracker t;
  t.AddPhysical(1, 100, 0);
  t.AddPhysical(2, 100, 0);
  t.Map(0x1000, 0x100, 1);
  t.Map(0x1100, 0x100, 2);
  t.Map(0x1200, 0x100, 99);  // imported or unshared: not tracked
  EXPECT_FALSE(t.HandleAt(0x1250).has_value());
  EXPECT_FALSE(t.ReleasePhysical(1).has_value());
  EXPECT_FALSE(t.ReleasePhysical(2).has_value());
  auto freed = t.Unmap(0x1000, 0x300);
  EXPECT_EQ(freed.size(), 2u);
  EXPECT_FALSE(t.ReleasePhysical(99).has_value());
}

TEST(TrackerTest, HostPhysicalIsTrackedButOnNoDevice) {
  Tracker t;
  t.AddPhysical(5, 4096, -1);
  EXPECT_EQ(t.PhysicalBytes(0), 0u);
  auto freed = t.ReleasePhysical(5);
  ASSERT_TRUE(freed.has_value());
  EXPECT_EQ(freed->device, -1);
}

TEST(TrackerTest, PoolsAreStableAndClearedForAForkChild) {
  Tracker t;
  auto* pool = reinterpret_cast<CUmemoryPool>(0x77);
  PoolState* ps = t.Pool(pool, 0, false);
  EXPECT_EQ(t.Pool(pool, 3, true), ps);  // existing state kept
  EXPECT_EQ(ps->device, 0);
  EXPECT_EQ(t.FindPool(pool), ps);
  EXPECT_EQ(t.Pools().size(), 1u);
  t.Add(0x5000, Allocation{10, 0, nullptr, AllocKind::kPool, pool});
  t.Clear();
  EXPECT_EQ(t.FindPool(pool), nullptr);
  EXPECT_EQ(t.allocation_count(), 0u);
}

// Limits reserve what exceeds a context's defaults; the stack for every resident thread.
TEST(TrackerTest, LimitReservationsAndTheirKeys) {
  const uint64_t threads = 132 * 2048;
  EXPECT_EQ(LimitReservation(CU_LIMIT_STACK_SIZE, 1024, threads), 0u);
  EXPECT_EQ(LimitReservation(CU_LIMIT_STACK_SIZE, 4096, threads), 3072 * threads);  // 792 MiB
  EXPECT_EQ(LimitReservation(CU_LIMIT_MALLOC_HEAP_SIZE, 4ULL << 20, threads), 0u);
  EXPECT_EQ(LimitReservation(CU_LIMIT_MALLOC_HEAP_SIZE, 1ULL << 30, threads),
            (1ULL << 30) - (8ULL << 20));
  EXPECT_EQ(LimitReservation(CU_LIMIT_PRINTF_FIFO_SIZE, 3ULL << 20, threads), 2ULL << 20);
  EXPECT_EQ(LimitReservation(5, 1ULL << 30, threads), 0u);  // reserves nothing
  auto* ctx = reinterpret_cast<CUcontext>(0x7f0012345670ULL);
  EXPECT_NE(LimitKey(ctx, CU_LIMIT_STACK_SIZE), LimitKey(ctx, CU_LIMIT_MALLOC_HEAP_SIZE));
  EXPECT_GE(LimitKey(ctx, CU_LIMIT_STACK_SIZE), 1ULL << 63);  // never a user-space address
  // Kept with the context's allocations: given back when the context goes.
  Tracker t;
  t.Add(LimitKey(ctx, CU_LIMIT_STACK_SIZE), Allocation{500, 0, ctx, AllocKind::kLimit});
  t.Add(0x1000, Allocation{100, 0, ctx, AllocKind::kLinear});
  EXPECT_EQ(t.TakeContext(ctx).size(), 2u);
}

}  // namespace
}  // namespace tessera::shim
