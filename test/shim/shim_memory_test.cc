// Every allocation path is counted, and given back exactly, against the fake driver's own
// ledger of the bytes really held: after every step, the pod's usage as the shim counts it
// equals what the driver holds for the pod's processes (tally == ledger), and the device the
// program sees reports free = cap - used.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "shim_testing.h"

namespace tessera::shim::testing {
namespace {

class MemoryPathsTest : public ::testing::Test {
 protected:
  MemoryPathsTest() : seg_(node_.Share("pod", 0, 1 * kGiB)), app_(node_, "pod") {}
  void SetUp() override { ASSERT_EQ(app_.Do("init"), "ok"); }

  uint64_t Used() { return seg_.Inspect().used_bytes; }
  // The shim's tally, the driver's ledger and the program's view agree.
  void ExpectConsistent(uint64_t expected_used) {
    EXPECT_EQ(Used(), expected_used);
    EXPECT_EQ(node_.PhysicalBytes(0), expected_used);
    EXPECT_EQ(app_.Values("meminfo"), (std::vector<uint64_t>{1 * kGiB - expected_used, 1 * kGiB}));
  }

  Node node_;
  Segment& seg_;
  Client app_;
};

TEST_F(MemoryPathsTest, LinearAndManaged) {
  ASSERT_EQ(app_.Do("alloc a 100000000"), "ok");
  ExpectConsistent(100000000);
  ASSERT_EQ(app_.Do("managed m 200000000"), "ok");
  ExpectConsistent(300000000);
  EXPECT_EQ(app_.Do("managed big 900000000"), "err 2");
  ExpectConsistent(300000000);
  ASSERT_EQ(app_.Do("free a"), "ok");
  ASSERT_EQ(app_.Do("free m"), "ok");
  ExpectConsistent(0);
}

TEST_F(MemoryPathsTest, PitchIsCountedAtThePitchTheDriverChose) {
  // Narrow rows: 512-byte pitch. Wide rows: the fake aligns to 1024, above the shim's estimate.
  EXPECT_EQ(app_.Do("pitch p 1000 1000"), "ok 1024");
  ExpectConsistent(1024 * 1000);
  EXPECT_EQ(app_.Do("pitch q 5000 1000"), "ok 5120");
  ExpectConsistent(1024 * 1000 + 5120 * 1000);
  ASSERT_EQ(app_.Do("free p"), "ok");
  ASSERT_EQ(app_.Do("free q"), "ok");
  ExpectConsistent(0);
  // A pitched allocation that passes the cap only at its real pitch is refused, nothing leaks.
  EXPECT_EQ(app_.Do("pitch r 4097 262000"), "err 2");
  ExpectConsistent(0);
}

TEST_F(MemoryPathsTest, ArraysAndMipmaps) {
  ASSERT_EQ(app_.Do("array a 4096 1024"), "ok");
  ASSERT_EQ(app_.Do("array3d b 512 512 16"), "ok");
  ASSERT_EQ(app_.Do("mipmap c 1024 1024 11"), "ok");
  const uint64_t used = node_.PhysicalBytes(0);
  EXPECT_GT(used, 4096u * 1024 * 16);
  ExpectConsistent(used);
  EXPECT_EQ(app_.Do("array3d huge 8192 8192 8"), "err 2");
  ASSERT_EQ(app_.Do("destroy a"), "ok");
  ASSERT_EQ(app_.Do("destroy b"), "ok");
  ASSERT_EQ(app_.Do("destroy c"), "ok");
  ExpectConsistent(0);
}

TEST_F(MemoryPathsTest, VirtualMemoryAtEveryLocationType) {
  ASSERT_EQ(app_.Do("vmm d 104857600 device"), "ok");  // 100 MiB
  ExpectConsistent(100 * kMiB);
  // Host locations (NCCL, PyTorch's expandable segments): never charged, never a crash.
  ASSERT_EQ(app_.Do("vmm h 2147483648 host"), "ok");
  ASSERT_EQ(app_.Do("vmm n 2147483648 host_numa"), "ok");
  ExpectConsistent(100 * kMiB);
  // Locations the driver refuses: refused, nothing charged.
  EXPECT_EQ(app_.Do("vmm c 2097152 host_numa_current"), "err 1");
  EXPECT_EQ(app_.Do("vmm u 2097152 unknown"), "err 1");
  ExpectConsistent(100 * kMiB);
  EXPECT_EQ(app_.Do("vmm big 1073741824 device"), "err 2");
  ExpectConsistent(100 * kMiB);
  ASSERT_EQ(app_.Do("vmmfree d"), "ok");
  ASSERT_EQ(app_.Do("vmmfree h"), "ok");
  ASSERT_EQ(app_.Do("vmmfree n"), "ok");
  ExpectConsistent(0);
}

// NCCL's pattern: release the handle right after mapping; the memory lives until unmapped.
TEST_F(MemoryPathsTest, VirtualMemoryLivesUntilLastReferenceAndMapping) {
  ASSERT_EQ(app_.Do("vmmearly e 209715200"), "ok");
  ExpectConsistent(200 * kMiB);
  ASSERT_EQ(app_.Do("vmmretain e"), "ok");  // retain + release through its address
  ExpectConsistent(200 * kMiB);
  ASSERT_EQ(app_.Do("vmmfree e"), "ok");
  ExpectConsistent(0);
}

TEST_F(MemoryPathsTest, StreamOrderedPoolsAreCountedByWhatTheyReserve) {
  // The default pool grows by 2 MiB chunks: what it reserves is what the GPU holds.
  ASSERT_EQ(app_.Do("async a 1000000"), "ok");
  ExpectConsistent(2 * kMiB);
  ASSERT_EQ(app_.Do("async b 300000000"), "ok");
  const uint64_t reserved = 2 * kMiB + 288 * kMiB;
  ExpectConsistent(reserved);
  // Freed memory stays in the pool until a synchronisation releases it (threshold 0).
  ASSERT_EQ(app_.Do("asyncfree b"), "ok");
  ExpectConsistent(reserved);
  ASSERT_EQ(app_.Do("sync"), "ok");
  ExpectConsistent(2 * kMiB);
  // Cached pool memory does not stand in the way of a new allocation that needs it: the pool
  // is trimmed rather than the allocation refused.
  ASSERT_EQ(app_.Do("async c 900000000"), "ok");
  ASSERT_EQ(app_.Do("asyncfree c"), "ok");
  ASSERT_EQ(app_.Do("alloc d 900000000"), "err 2");  // the pool still holds it: really full
  ASSERT_EQ(app_.Do("sync"), "ok");
  ASSERT_EQ(app_.Do("alloc d 900000000"), "ok");
  ASSERT_EQ(app_.Do("free d"), "ok");
  ASSERT_EQ(app_.Do("asyncfree a"), "ok");
  ASSERT_EQ(app_.Do("sync"), "ok");
  ExpectConsistent(0);
}

TEST_F(MemoryPathsTest, ExplicitPools) {
  ASSERT_EQ(app_.Do("poolcreate"), "ok");
  ASSERT_EQ(app_.Do("poolalloc a 100000000"), "ok");
  ExpectConsistent(96 * kMiB);
  EXPECT_EQ(app_.Do("poolalloc b 1000000000"), "err 2");
  ExpectConsistent(96 * kMiB);
  ASSERT_EQ(app_.Do("asyncfree a"), "ok");
  ASSERT_EQ(app_.Do("trim"), "ok");
  ExpectConsistent(0);
  ASSERT_EQ(app_.Do("poolalloc c 10000000"), "ok");
  ExpectConsistent(10 * kMiB);
  // Destroyed with an allocation outstanding: freed with its last allocation.
  ASSERT_EQ(app_.Do("pooldestroy"), "ok");
  ExpectConsistent(10 * kMiB);
  ASSERT_EQ(app_.Do("asyncfree c"), "ok");
  ExpectConsistent(0);
}

// The attack: export a cuMemCreate allocation as a file descriptor, import it in another
// process, release the original. The driver keeps the memory while any process holds it, so the
// pod's usage must too: counted once (in a shared slot of the ledger) from export until the last
// holder lets go.
TEST_F(MemoryPathsTest, ExportedVirtualMemoryCountsOnceWhileAnyProcessHoldsIt) {
  Client importer(node_, "pod");
  ASSERT_EQ(importer.Do("init"), "ok");
  const std::string sock = node_.dir() + "/vmm.sock";
  ASSERT_EQ(importer.Do("fdlisten " + sock), "ok");
  ASSERT_EQ(app_.Do("vmm x 314572800 device"), "ok");  // 300 MiB
  ASSERT_EQ(app_.Do("vmmsend x " + sock), "ok");
  ASSERT_EQ(importer.Do("vmmimport x"), "ok");
  ExpectConsistent(300 * kMiB);  // once, though two processes hold it
  EXPECT_EQ(importer.Values("meminfo"), (std::vector<uint64_t>{724 * kMiB, 1 * kGiB}));
  ASSERT_EQ(app_.Do("vmmfree x"), "ok");  // the creator lets go; the importer still holds it
  ExpectConsistent(300 * kMiB);
  EXPECT_EQ(importer.Do("alloc y 838860800"), "err 2");  // 800 MiB: the cap still holds
  ASSERT_EQ(importer.Do("vmmfree x"), "ok");
  ExpectConsistent(0);
  EXPECT_EQ(importer.Do("alloc y 838860800"), "ok");
}

// A descriptor exported and kept (not imported) holds the memory in the driver after its creator
// released the handle: it stays counted until the descriptor is closed.
TEST_F(MemoryPathsTest, AnOpenExportedDescriptorKeepsItsMemoryCounted) {
  ASSERT_EQ(app_.Do("vmm x 419430400 device"), "ok");  // 400 MiB
  ASSERT_EQ(app_.Do("vmmexport x"), "ok");
  ASSERT_EQ(app_.Do("vmmfree x"), "ok");
  ExpectConsistent(400 * kMiB);
  EXPECT_EQ(app_.Do("alloc y 734003200"), "err 2");  // 700 MiB
  ASSERT_EQ(app_.Do("fdclose x"), "ok");
  EXPECT_EQ(app_.Do("alloc y 734003200"), "ok");
  ExpectConsistent(700 * kMiB);
}

// Another pod's export imported here: charged to the importer by what it maps, as long as it
// holds it (the exporter's pod counts its own holding).
TEST(SharingTest, AnImportFromAnotherPodIsChargedToTheImporter) {
  Node node;
  Segment& a = node.Share("a", 0, 1 * kGiB);
  Segment& b = node.Share("b", 0, 1 * kGiB);
  Client exporter(node, "a"), importer(node, "b");
  ASSERT_EQ(exporter.Do("init"), "ok");
  ASSERT_EQ(importer.Do("init"), "ok");
  const std::string sock = node.dir() + "/vmm.sock";
  ASSERT_EQ(importer.Do("fdlisten " + sock), "ok");
  ASSERT_EQ(exporter.Do("vmm x 209715200 device"), "ok");  // 200 MiB
  ASSERT_EQ(exporter.Do("vmmsend x " + sock), "ok");
  ASSERT_EQ(importer.Do("vmmimport x"), "ok");
  EXPECT_EQ(a.Inspect().used_bytes, 200 * kMiB);
  EXPECT_EQ(b.Inspect().used_bytes, 200 * kMiB);
  ASSERT_EQ(exporter.Do("vmmfree x"), "ok");
  EXPECT_EQ(a.Inspect().used_bytes, 0u);
  EXPECT_EQ(b.Inspect().used_bytes, 200 * kMiB);
  EXPECT_EQ(node.PhysicalBytes(0), 200 * kMiB);
  ASSERT_EQ(importer.Do("vmmfree x"), "ok");
  EXPECT_EQ(b.Inspect().used_bytes, 0u);
  EXPECT_EQ(node.PhysicalBytes(0), 0u);
}

// Memory the driver reserves for a context's raised limits (device malloc heap, stack for every
// resident thread, printf FIFO) is counted: a 4 KiB stack on this GPU would take 792 MiB.
TEST_F(MemoryPathsTest, RaisedContextLimitsAreChargedAsReservations) {
  ASSERT_EQ(app_.Do("setlimit heap 268435456"), "ok");  // 256 MiB: 248 MiB beyond the default
  ExpectConsistent(248 * kMiB);
  // 3 KiB of stack: 2 KiB beyond the default, for 132 SMs x 2048 threads = 528 MiB.
  ASSERT_EQ(app_.Do("setlimit stack 3072"), "ok");
  ExpectConsistent(776 * kMiB);
  EXPECT_EQ(app_.Do("setlimit stack 8192"), "err 2");  // 1848 MiB more: over the cap
  ExpectConsistent(776 * kMiB);
  EXPECT_EQ(app_.Do("alloc a 314572800"), "err 2");   // 300 MiB: the reservations hold the cap
  ASSERT_EQ(app_.Do("setlimit heap 8388608"), "ok");  // back to the default
  ExpectConsistent(528 * kMiB);
  ASSERT_EQ(app_.Do("reset"), "ok");  // the context goes, and its reservations with it
  ASSERT_EQ(app_.Do("init"), "ok");
  ExpectConsistent(0);
}

// A graph's allocation nodes take memory when it is launched, and the driver keeps it reserved
// for the next launch until trimmed: counted from the launch; a launch that would pass the cap
// is refused instead of run.
TEST_F(MemoryPathsTest, GraphAllocationsAreCountedAndCapped) {
  ASSERT_EQ(app_.Do("graphalloc g 314572800 1"), "ok");  // 300 MiB, freed inside the graph
  ExpectConsistent(0);                                   // nothing until it runs
  ASSERT_EQ(app_.Do("graphlaunch g"), "ok");
  ExpectConsistent(300 * kMiB);                          // freed, but still reserved
  EXPECT_EQ(app_.Do("alloc a 838860800"), "err 2");      // 800 MiB
  ASSERT_EQ(app_.Do("graphalloc h 943718400 0"), "ok");  // 900 MiB, kept after the graph
  ASSERT_EQ(app_.Do("graphlaunch h"), "ok");  // fits once the reserved 300 MiB are trimmed
  ExpectConsistent(900 * kMiB);
  EXPECT_EQ(app_.Do("graphlaunch g"), "err 2");  // 300 MiB more: refused, not run
  ExpectConsistent(900 * kMiB);
  ASSERT_EQ(app_.Do("graphfree h"), "ok");
  ASSERT_EQ(app_.Do("sync"), "ok");
  ExpectConsistent(900 * kMiB);  // free, still reserved
  ASSERT_EQ(app_.Do("graphtrim"), "ok");
  ExpectConsistent(0);
}

// IPC: the importer's view of the exporter's memory is not counted again.
TEST_F(MemoryPathsTest, IpcImportsAreNotCountedTwice) {
  Client importer(node_, "pod");
  ASSERT_EQ(importer.Do("init"), "ok");
  ASSERT_EQ(app_.Do("alloc x 300000000"), "ok");
  ASSERT_EQ(app_.Do("write x 7"), "ok");
  std::string handle = app_.Do("ipcget x");
  ASSERT_EQ(handle.rfind("ok ", 0), 0u) << handle;
  ASSERT_EQ(importer.Do("ipcopen x " + handle.substr(3)), "ok");
  EXPECT_EQ(importer.Do("read x"), "ok 7");
  ExpectConsistent(300000000);
  EXPECT_EQ(importer.Values("meminfo"), (std::vector<uint64_t>{1 * kGiB - 300000000, 1 * kGiB}));
  ASSERT_EQ(importer.Do("ipcclose x"), "ok");
  ExpectConsistent(300000000);
  ASSERT_EQ(app_.Do("free x"), "ok");
  ExpectConsistent(0);
}

// The IPC escape: export linear memory with cuIpcGetMemHandle, open it in a second process of the
// pod, free it in the first. CUDA leaves a free before the opener's close undefined, and a driver
// may keep the memory for the opener: it stays counted, once, until the opener closes it too.
// (Before, the exporter's free gave its 600 MiB back while the opener still mapped it, and a
// second 600 MiB fitted under the 1 GiB cap.) The fake driver frees the memory at the exporter's
// free, so the shim's count is checked here, not the driver's; driver_check's
// ipc_free_while_opened says what a real driver does.
TEST_F(MemoryPathsTest, IpcMemoryFreedByItsExporterStaysCountedWhileOpened) {
  Client importer(node_, "pod");
  ASSERT_EQ(importer.Do("init"), "ok");
  ASSERT_EQ(app_.Do("alloc x 629145600"), "ok");  // 600 MiB
  std::string handle = app_.Do("ipcget x");
  ASSERT_EQ(handle.rfind("ok ", 0), 0u) << handle;
  EXPECT_EQ(app_.Do("ipcget x"), handle);  // asked again: the same handle, one slot
  EXPECT_EQ(seg_.Inspect().shared_bytes, 600 * kMiB);
  ASSERT_EQ(importer.Do("ipcopen x " + handle.substr(3)), "ok");
  ExpectConsistent(600 * kMiB);
  ASSERT_EQ(app_.Do("free x"), "ok");
  EXPECT_EQ(Used(), 600 * kMiB) << "the opener still holds it";
  EXPECT_EQ(app_.Do("alloc y 629145600"), "err 2");
  EXPECT_EQ(importer.Do("alloc y 629145600"), "err 2");
  ASSERT_EQ(importer.Do("ipcclose x"), "ok");
  EXPECT_EQ(Used(), 0u);
  EXPECT_EQ(app_.Do("alloc y 629145600"), "ok");
  ExpectConsistent(600 * kMiB);
}

// The CUDA 2.x allocators (32-bit ABI, no _v2 suffix) are still exported by drivers: reached by
// name past the _v2 hooks they allocated uncounted (before, two 600 MiB cuMemAlloc calls succeeded
// under a 1 GiB cap and the driver held 1.2 GiB for the pod). Refused on a shared GPU.
TEST_F(MemoryPathsTest, TheCuda2AllocatorsAreRefusedOnASharedGpu) {
  for (const char* call : {"legacy cuMemAlloc 629145600", "legacy cuMemAllocPitch 629145600",
                           "legacy cuArrayCreate 629145600", "legacy cuArray3DCreate 629145600"}) {
    EXPECT_EQ(app_.Do(call), "err 801") << call;  // CUDA_ERROR_NOT_SUPPORTED
  }
  ExpectConsistent(0);
  EXPECT_EQ(app_.Do("alloc a 629145600"), "ok");  // the _v2 path is untouched
  ExpectConsistent(600 * kMiB);
}

// NVML reports the share, and the pod's processes with what they hold.
TEST_F(MemoryPathsTest, NvmlSeesTheShareAndThePodsProcesses) {
  ASSERT_EQ(app_.Do("alloc a 104857600"), "ok");
  EXPECT_EQ(app_.Values("nvmlmem"), (std::vector<uint64_t>{100 * kMiB, 924 * kMiB, 1 * kGiB}));
  std::string pid = app_.Do("pid").substr(3);
  EXPECT_EQ(app_.Do("nvmlprocs"), "ok " + pid + ":104857600");
}

// A live resize by the agent applies at once: the program sees the new total, and a shrink
// below what is held refuses new allocations without taking anything away.
TEST_F(MemoryPathsTest, LiveResize) {
  ASSERT_EQ(app_.Do("alloc a 524288000"), "ok");  // 500 MiB
  ShareLimits bigger;
  bigger.memory_limit_bytes = 2 * kGiB;
  ASSERT_TRUE(seg_.Update(bigger).ok());
  EXPECT_EQ(app_.Values("totalmem"), (std::vector<uint64_t>{2 * kGiB}));
  EXPECT_EQ(app_.Do("alloc b 1073741824"), "ok");
  ShareLimits smaller;
  smaller.memory_limit_bytes = 1 * kGiB;
  ASSERT_TRUE(seg_.Update(smaller).ok());
  EXPECT_EQ(app_.Values("meminfo"), (std::vector<uint64_t>{0, 1 * kGiB}));
  EXPECT_EQ(app_.Do("alloc c 1048576"), "err 2");
  ASSERT_EQ(app_.Do("free b"), "ok");
  EXPECT_EQ(app_.Do("alloc c 1048576"), "ok");
}

// Destroying or resetting a context gives back what it held.
TEST(ContextTest, DestroyedContextsGiveTheirMemoryBack) {
  Node node;
  Segment& seg = node.Share("pod", 0, 1 * kGiB);
  Client app(node, "pod", true, LoadMode::Linked());
  ASSERT_EQ(app.Do("ctx4"), "ok");
  ASSERT_EQ(app.Do("alloc a 524288000"), "ok");
  ASSERT_EQ(app.Do("array b 1024 1024"), "ok");
  EXPECT_EQ(seg.Inspect().used_bytes, node.PhysicalBytes(0));
  ASSERT_EQ(app.Do("ctxdestroy"), "ok");
  EXPECT_EQ(seg.Inspect().used_bytes, 0u);
  EXPECT_EQ(node.PhysicalBytes(0), 0u);
  ASSERT_EQ(app.Do("init"), "ok");
  ASSERT_EQ(app.Do("alloc c 314572800"), "ok");
  ASSERT_EQ(app.Do("managed d 104857600"), "ok");
  EXPECT_EQ(seg.Inspect().used_bytes, 400 * kMiB);
  ASSERT_EQ(app.Do("reset"), "ok");  // cudaDeviceReset
  EXPECT_EQ(seg.Inspect().used_bytes, 0u);
  EXPECT_EQ(node.PhysicalBytes(0), 0u);
  ASSERT_EQ(app.Do("init"), "ok");
  EXPECT_EQ(app.Do("alloc e 1073741824"), "ok");  // the whole cap is free again
}

// Three containers' processes on one GPU, each in its own PID namespace with its own /proc, as a
// container runtime starts them: each sees only itself, the host sees all three with what they
// hold, and none takes the others for dead. (The fake driver once judged "am I the host?" by its
// NSpid line, which has one number in a container too: each container freed its neighbours'
// memory, and the agent's per-pod driver figures showed one pod of three.)
TEST(ContainersTest, ProcessesInOtherPidNamespacesKeepTheirMemory) {
  Node node;
  const LoadMode container = {
      "/usr/bin/unshare", {"--pid", "--fork", "--mount-proc", TESSERA_SHIM_CLIENT}, "container"};
  std::vector<std::unique_ptr<Client>> apps;
  for (int i = 1; i <= 3; ++i) {
    apps.push_back(std::make_unique<Client>(node, "pod", /*shim=*/false, container));
    ASSERT_EQ(apps.back()->Do("init"), "ok") << "unshare needs root (CAP_SYS_ADMIN)";
    ASSERT_EQ(apps.back()->Do("alloc a " + std::to_string(i * 100 * kMiB)), "ok");
  }
  for (auto& app : apps) {
    ASSERT_EQ(app->Do("meminfo").rfind("ok ", 0), 0u);  // the driver counts what is live
    const std::string own = app->Do("nvmlprocs");       // only itself, by its own PID
    EXPECT_EQ(std::count(own.begin(), own.end(), ':'), 1) << own;
  }
  Client host(node, "pod", /*shim=*/false);
  const std::string all = host.Do("nvmlprocs");
  for (int i = 1; i <= 3; ++i) {
    EXPECT_NE(all.find(":" + std::to_string(i * 100 * kMiB)), std::string::npos) << all;
  }
  EXPECT_EQ(node.PhysicalBytes(0), 600 * kMiB);
}

}  // namespace
}  // namespace tessera::shim::testing
