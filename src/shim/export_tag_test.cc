#include "shim/export_tag.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>

#include "gtest/gtest.h"

namespace tessera::shim {
namespace {

// Passes `fd` through a Unix socket (SCM_RIGHTS), as NCCL and PyTorch hand exported handles on.
int PassThroughSocket(int fd) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv) != 0) return -1;
  char byte = 0, control[CMSG_SPACE(sizeof(int))] = {};
  iovec iov{&byte, 1};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  int out = -1;
  if (::sendmsg(sv[0], &msg, 0) == 1 && ::recvmsg(sv[1], &msg, 0) == 1) {
    std::memcpy(&out, CMSG_DATA(CMSG_FIRSTHDR(&msg)), sizeof(int));
  }
  ::close(sv[0]);
  ::close(sv[1]);
  return out;
}

TEST(ExportTagTest, TheKeyTravelsWithTheDescriptorAndTellsWhetherItIsOpen) {
  char path[] = "/tmp/tessera-export-tag-XXXXXX";
  int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ::unlink(path);
  const uint64_t key = NewExportKey();
  ASSERT_GT(key, 0u);
  ASSERT_LE(key, kExportKeyMask);
  EXPECT_EQ(ReadExportTag(fd), 0u);
  int probe = OpenProbe(fd);
  ASSERT_GE(probe, 0);
  EXPECT_FALSE(ExportedDescriptorOpen(probe, key));
  ASSERT_TRUE(TagDescriptor(fd, key));
  EXPECT_TRUE(ExportedDescriptorOpen(probe, key));
  EXPECT_FALSE(ExportedDescriptorOpen(probe, key ^ 1));
  EXPECT_EQ(ReadExportTag(probe), 0u);  // another description: not tagged

  int passed = PassThroughSocket(fd);
  ASSERT_GE(passed, 0);
  EXPECT_EQ(ReadExportTag(passed), key);
  ::close(fd);
  EXPECT_TRUE(ExportedDescriptorOpen(probe, key));  // a copy is still open
  EXPECT_EQ(ReadExportTag(::dup(passed)), key);
  ::close(passed);
  EXPECT_TRUE(ExportedDescriptorOpen(probe, key));  // the dup above
  for (int i = 0; i < 1024; ++i) {
    if (i != probe && ReadExportTag(i) == key) ::close(i);
  }
  EXPECT_FALSE(ExportedDescriptorOpen(probe, key));
  ::close(probe);
}

// An IPC handle names its memory by its bytes: the same bytes give the same key in every process,
// other bytes another key, and no key is one NewExportKey could give.
TEST(ExportTagTest, IpcHandlesAreKeyedByTheirBytes) {
  unsigned char a[64] = {}, b[64] = {};
  for (int i = 0; i < 64; ++i) a[i] = b[i] = static_cast<unsigned char>(i * 7);
  EXPECT_EQ(IpcHandleKey(a, sizeof(a)), IpcHandleKey(b, sizeof(b)));
  b[63] ^= 1;
  EXPECT_NE(IpcHandleKey(a, sizeof(a)), IpcHandleKey(b, sizeof(b)));
  unsigned char zero[64] = {};
  for (const unsigned char* h : std::initializer_list<const unsigned char*>{a, b, zero}) {
    EXPECT_GT(IpcHandleKey(h, 64), kExportKeyMask);
  }
}

}  // namespace
}  // namespace tessera::shim
