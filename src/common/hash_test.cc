#include "common/hash.h"

#include "gtest/gtest.h"

namespace tessera {
namespace {

// The published values (draft-eastlake-fnv's test vectors): names built on these never change.
TEST(Fnv1a, KnownValues) {
  EXPECT_EQ(Fnv1a(""), 0xcbf29ce484222325ULL);
  EXPECT_EQ(Fnv1a("a"), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(Fnv1a("foobar"), 0x85944171f73967e8ULL);
  static_assert(Fnv1a("") == kFnv1aOffsetBasis);
}

TEST(Fnv1a, ContinuesFromAPreviousHash) { EXPECT_EQ(Fnv1a("bar", Fnv1a("foo")), Fnv1a("foobar")); }

// The DRA driver's seed: slice names of long node names and long attribute values depend on it.
TEST(Fnv1a, TheDraSeedIsTheOneSlicesWerePublishedWith) {
  EXPECT_EQ(Fnv1a("node-a", kFnv1aDraSeed), 0xfe74312fe71ade01ULL);
}

TEST(Fnv1a, HashesHighBytesAsUnsigned) {
  EXPECT_EQ(Fnv1a("\xff"), (kFnv1aOffsetBasis ^ 0xffULL) * kFnv1aPrime);
}

}  // namespace
}  // namespace tessera
