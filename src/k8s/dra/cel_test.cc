#include "k8s/dra/cel.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "k8s/testing/dra_objects.h"

namespace tessera::k8s::dra {
namespace {

using ::testing::HasSubstr;

// Device gpu-3 of an 8 x H100 node, as the driver publishes it.
std::shared_ptr<const SliceInfo> Slice() {
  nlohmann::json s = testing::SliceObject("node-a").Gpus(8, "H100-80GB", "80Gi").Json();
  auto slice = DecodeSlice(s);
  EXPECT_TRUE(slice->error.empty()) << slice->error;
  return slice;
}

absl::StatusOr<bool> Eval(std::string_view expression, int device = 3) {
  static std::shared_ptr<const SliceInfo> slice = Slice();
  absl::StatusOr<std::shared_ptr<const CelProgram>> p = CelProgram::Compile(expression);
  if (!p.ok()) return p.status();
  return (*p)->Matches(CelDevice{slice->driver, &slice->devices[device]});
}

bool True(std::string_view e) {
  absl::StatusOr<bool> r = Eval(e);
  EXPECT_TRUE(r.ok()) << e << ": " << r.status();
  return r.ok() && *r;
}
bool False(std::string_view e) {
  absl::StatusOr<bool> r = Eval(e);
  EXPECT_TRUE(r.ok()) << e << ": " << r.status();
  return r.ok() && !*r;
}

TEST(Cel, WhatRealDeviceClassesWrite) {
  EXPECT_TRUE(True("device.driver == 'gpu.tessera.dev'"));
  EXPECT_TRUE(True("device.driver == \"gpu.tessera.dev\" && device.allowMultipleAllocations"));
  EXPECT_TRUE(True("device.attributes[\"gpu.tessera.dev\"].model == \"H100-80GB\""));
  EXPECT_TRUE(False("device.attributes['gpu.tessera.dev'].model == 'A100-80GB'"));
  EXPECT_TRUE(True("device.capacity['gpu.tessera.dev'].memory.compareTo(quantity('40Gi')) >= 0"));
  EXPECT_TRUE(False("device.capacity['gpu.tessera.dev'].memory.compareTo(quantity('81Gi')) >= 0"));
  EXPECT_TRUE(True("device.capacity['gpu.tessera.dev'].memory.isGreaterThan(quantity('79Gi'))"));
  EXPECT_TRUE(True("device.capacity['gpu.tessera.dev'].memory == quantity('81920Mi')"));
  EXPECT_TRUE(True("device.attributes['gpu.tessera.dev'].index in [1, 3, 5]"));
  EXPECT_TRUE(False("device.attributes['gpu.tessera.dev'].index in [0, 2]"));
  EXPECT_TRUE(
      True("device.attributes['gpu.tessera.dev'].numaNode == 0 || "
           "device.attributes['gpu.tessera.dev'].index > 6"));
  EXPECT_TRUE(True("device.attributes['resource.kubernetes.io'].pcieRoot == 'pci0000:01'"));
  EXPECT_TRUE(
      True("device.attributes['gpu.tessera.dev'].driverVersion.isGreaterThan("
           "semver('550.0.0'))"));
  EXPECT_TRUE(True("device.attributes['gpu.tessera.dev'].driverVersion.major() == 570"));
  EXPECT_TRUE(
      True("cel.bind(g, device.attributes['gpu.tessera.dev'], g.numaNode == 0 && "
           "!g.migCapable)"));
  EXPECT_TRUE(True("'model' in device.attributes['gpu.tessera.dev']"));
  EXPECT_TRUE(True("has(device.attributes['gpu.tessera.dev'].uuid)"));
  EXPECT_TRUE(False("has(device.attributes['gpu.tessera.dev'].clique)"));
  EXPECT_TRUE(True("device.attributes['gpu.tessera.dev'].productName.startsWith('NVIDIA H1')"));
  EXPECT_TRUE(True("size(device.attributes['gpu.tessera.dev'].uuid) > 4"));
  EXPECT_TRUE(True("device.attributes['gpu.tessera.dev'].index * 2 + 1 == 7 ? true : false"));
}

TEST(Cel, MissingDomainIsEmptyMissingKeyIsAnError) {
  // As kube-scheduler: an unknown domain reads as an empty map...
  EXPECT_TRUE(False("'model' in device.attributes['other.example.com']"));
  EXPECT_TRUE(False("has(device.attributes['other.example.com'].model)"));
  // ...but a missing key in it is a runtime error, absorbed by && / || when the other side
  // decides.
  absl::StatusOr<bool> r = Eval("device.attributes['other.example.com'].model == 'x'");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("no such key: model"));
  EXPECT_TRUE(False("device.attributes['other.example.com'].model == 'x' && false"));
  EXPECT_TRUE(False("false && device.attributes['other.example.com'].model == 'x'"));
  EXPECT_TRUE(True("device.attributes['other.example.com'].model == 'x' || true"));
  EXPECT_FALSE(Eval("device.attributes['other.example.com'].model == 'x' && true").ok());
}

TEST(Cel, TypesAndResults) {
  EXPECT_TRUE(False("device.attributes['gpu.tessera.dev'].index == '3'"));  // int vs string
  absl::StatusOr<bool> r = Eval("device.attributes['gpu.tessera.dev'].index < 'x'");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("no such overload"));
  r = Eval("device.attributes['gpu.tessera.dev'].index");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("not bool"));
  EXPECT_FALSE(Eval("1 / 0 == 1").ok());
  EXPECT_FALSE(Eval("9223372036854775807 + 1 > 0").ok());
  EXPECT_TRUE(True("-9223372036854775808 < 0"));
  EXPECT_TRUE(True("'a\\x41\\u00e9' == 'aAé'"));
  EXPECT_TRUE(True("r'a\\n' == 'a\\\\n'"));
  EXPECT_TRUE(True("semver('1.2.3-alpha.1') < semver('1.2.3') == false || true"));
  EXPECT_TRUE(True("semver('1.2.3-alpha.1').isLessThan(semver('1.2.3-alpha.beta'))"));
  EXPECT_TRUE(True("semver('1.2.3-beta.2').isLessThan(semver('1.2.3-beta.11'))"));
  EXPECT_TRUE(True("semver('1.2.3+build') == semver('1.2.3')"));
  EXPECT_TRUE(False("isSemver('01.2.3')"));
  EXPECT_TRUE(True("isQuantity('1.5Gi') && !isQuantity('1.5Gx')"));
  EXPECT_TRUE(True("quantity('1.5Gi').compareTo(quantity('1536Mi')) == 0"));
  EXPECT_TRUE(True("quantity('250m').add(1).isGreaterThan(quantity('1'))"));
  EXPECT_TRUE(True("quantity('2').asInteger() == 2 && !quantity('2500m').isInteger()"));
}

TEST(Cel, WhatIsNotSupportedIsRefusedAtCompileTimeNamingIt) {
  struct Case {
    const char* expression;
    const char* names;
  };
  const Case cases[] = {
      {"device.attributes['gpu.tessera.dev'].model.matches('^H1')", "the method 'matches'"},
      {"[1, 2].exists(x, x == 1)", "the macro 'exists'"},
      {"[1, 2].all(x, x > 0)", "the macro 'all'"},
      {"device.capacity['gpu.tessera.dev'].memory.asApproximateFloat() > 1",
       "the method 'asApproximateFloat'"},
      {"1.5 > 1", "a floating-point literal"},
      {"1u == 1", "an unsigned integer literal"},
      {"b'abc' == b'abc'", "a bytes literal"},
      {"{'a': 1}['a'] == 1", "a map literal"},
      {"url('http://x').getHost() == 'x'", "the function 'url'"},
      {"'''x''' == 'x'", "a triple-quoted string"},
      {"cel.index(1)", "cel.index"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::shared_ptr<const CelProgram>> p = CelProgram::Compile(c.expression);
    ASSERT_FALSE(p.ok()) << c.expression;
    EXPECT_EQ(p.status().code(), absl::StatusCode::kUnimplemented) << c.expression;
    EXPECT_THAT(p.status().message(), HasSubstr(c.names)) << c.expression;
    EXPECT_THAT(p.status().message(), HasSubstr("column ")) << c.expression;
  }
  absl::StatusOr<std::shared_ptr<const CelProgram>> p =
      CelProgram::Compile("device.attributes['gpu.tessera.dev'].model.matches('^H1')");
  EXPECT_THAT(p.status().message(), HasSubstr("column 44"));
}

// Selectors are user-written: nesting is bounded before parsing, evaluation or the tree's own
// destruction can run out of stack, with an error that says so (the attack: a claim whose
// selector is ten thousand parentheses deep crashed the scheduler).
TEST(Cel, NestingDeeperThanTheLimitIsRefusedWithAClearError) {
  auto deep = [](int n, std::string_view open, std::string_view core, std::string_view close) {
    std::string e;
    for (int i = 0; i < n; ++i) e += open;
    e += core;
    for (int i = 0; i < n; ++i) e += close;
    return e;
  };
  std::string chain = "1 == 1";
  for (int i = 0; i < 100000; ++i) chain += " && 1 == 1";
  std::string members = "device.attributes[\"d\"]";
  for (int i = 0; i < 100000; ++i) members += ".x";
  for (const std::string& e :
       {deep(100000, "(", "true", ")"), deep(100000, "!", "true", ""),
        deep(100000, "-", "1 == 1", ""), deep(100000, "[", "1", "]"), chain, members,
        deep(100000, "size(", "'a'", ") == 1"), deep(300, "(", "true", ")")}) {
    absl::StatusOr<std::shared_ptr<const CelProgram>> p = CelProgram::Compile(e);
    ASSERT_FALSE(p.ok()) << e.substr(0, 40);
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << p.status();
    EXPECT_NE(p.status().message().find("nests deeper than 250 levels"), std::string::npos)
        << p.status();
  }
  // Within the limit: fine, and evaluated.
  Device d;
  auto ok = CelProgram::Compile(deep(100, "(", "device.driver == 'gpu.tessera.dev'", ")"));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(*(*ok)->Matches(CelDevice{"gpu.tessera.dev", &d}), true);
  std::string long_chain = "true";
  for (int i = 0; i < 200; ++i) long_chain += " && true";
  EXPECT_TRUE(CelProgram::Compile(long_chain).ok());
}

TEST(Cel, SyntaxErrorsSayWhere) {
  for (const char* e : {"device.driver ==", "(device.driver == 'x'", "device.drivr == 'x'",
                        "foo == 1", "device.driver == 'x", "size(1, 2) == 1", "has(device) "}) {
    absl::StatusOr<std::shared_ptr<const CelProgram>> p = CelProgram::Compile(e);
    ASSERT_FALSE(p.ok()) << e;
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << e << ": " << p.status();
    EXPECT_THAT(p.status().message(), HasSubstr("column")) << e;
  }
}

TEST(Cel, DevicesDiffer) {
  absl::StatusOr<std::shared_ptr<const CelProgram>> p =
      CelProgram::Compile("device.attributes['gpu.tessera.dev'].numaNode == 1");
  ASSERT_TRUE(p.ok());
  std::shared_ptr<const SliceInfo> slice = Slice();
  int matched = 0;
  for (const Device& d : slice->devices) {
    absl::StatusOr<bool> m = (*p)->Matches(CelDevice{slice->driver, &d});
    ASSERT_TRUE(m.ok());
    matched += *m ? 1 : 0;
  }
  EXPECT_EQ(matched, 4);
}

}  // namespace
}  // namespace tessera::k8s::dra
