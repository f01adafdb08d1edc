#include "agent/nri/protowire.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::agent::protowire {
namespace {

std::string Hex(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

TEST(Protowire, EncodesAsTheProtobufDocumentationShows) {
  // developers.google.com/protocol-buffers/docs/encoding: field 1 = 150 is 08 96 01; field 2 =
  // "testing" is 12 07 74 65 73 74 69 6e 67.
  Writer w;
  w.Varint(1, 150);
  w.String(2, "testing");
  EXPECT_EQ(Hex(w.data()), "089601120774657374696e67");
  // proto3 defaults are not written; a present empty message is.
  Writer d;
  d.Varint(1, 0);
  d.String(2, "");
  d.Bool(3, false);
  EXPECT_EQ(d.data(), "");
  d.Bytes(4, "");
  EXPECT_EQ(Hex(d.data()), "2200");
  // A negative int32 is sign-extended to ten bytes.
  Writer n;
  n.Int32(1, -1);
  EXPECT_EQ(Hex(n.data()), "08ffffffffffffffffff01");
  Writer m;
  m.MapEntry(5, "a", "b");
  EXPECT_EQ(Hex(m.data()), "2a060a0161120162");
}

TEST(Protowire, ReadsEveryWireTypeAndSkipsWhatItDoesNotKnow) {
  // 1: varint 300, 2: fixed64 1, 3: bytes "hi", 4: fixed32 7, 5: varint 1.
  const std::string data(
      "\x08\xac\x02\x11\x01\x00\x00\x00\x00\x00\x00\x00\x1a\x02hi\x25\x07\x00\x00\x00\x28\x01", 23);
  Reader r(data);
  std::vector<int> fields;
  while (r.Next()) {
    fields.push_back(r.field());
    if (r.field() == 1) {
      EXPECT_EQ(r.varint(), 300u);
    } else if (r.field() == 2) {
      EXPECT_EQ(r.varint(), 1u);
    } else if (r.field() == 3) {
      EXPECT_EQ(r.bytes(), "hi");
    } else if (r.field() == 4) {
      EXPECT_EQ(r.varint(), 7u);
    }
  }
  EXPECT_TRUE(r.status().ok()) << r.status();
  EXPECT_EQ(fields, (std::vector<int>{1, 2, 3, 4, 5}));
}

TEST(Protowire, RejectsBrokenInput) {
  for (const std::string& bad :
       {std::string("\x08", 1), std::string("\x1a\x05hi", 4), std::string("\x11\x01\x02", 3),
        std::string("\x0b\x00", 2) /* group start */, std::string("\x00\x01", 2) /* field 0 */,
        std::string("\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 12)}) {
    Reader r(bad);
    while (r.Next()) {
    }
    EXPECT_FALSE(r.status().ok()) << Hex(bad);
    EXPECT_THAT(std::string(r.status().message()), ::testing::HasSubstr("protobuf: "));
  }
}

}  // namespace
}  // namespace tessera::agent::protowire
