// proto/k8s_core.proto against Kubernetes' own: every field we declare has the number, the label
// (optional, repeated, map) and the type that the generated.proto files of the k8s.io/api and
// k8s.io/apimachinery modules the test harness builds with (test/controlplane/go.mod) give it.
// A wrong number would decode another field silently, so this runs wherever the harness is built
// (label e2e: test/controlplane/build.sh fills the module cache).
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace tessera::k8s {
namespace {

namespace fs = std::filesystem;

struct Field {
  std::string label, type;
  int number = 0;
};
using Messages = std::map<std::string, std::map<std::string, Field>>;

std::string Read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// "map<string, .k8s.io.apimachinery.pkg.api.resource.Quantity>" -> "map<string,Quantity>";
// ".k8s.io.apimachinery.pkg.apis.meta.v1.Time" -> "Time".
std::string ShortType(std::string t) {
  static const std::regex qualified("\\.?([a-zA-Z0-9_]+\\.)+");
  t = std::regex_replace(t, qualified, "");
  t.erase(std::remove(t.begin(), t.end(), ' '), t.end());
  return t;
}

// The top-level messages of a .proto file and their fields (comments dropped).
Messages Parse(const std::string& text) {
  Messages out;
  std::istringstream in(text);
  std::string line, current;
  static const std::regex message("^message ([A-Za-z0-9_]+) \\{");
  static const std::regex field(
      "^\\s*(optional|repeated)?\\s*(map<[^>]+>|[A-Za-z0-9_.]+)\\s+([A-Za-z0-9_]+)\\s*=\\s*"
      "([0-9]+)\\s*;");
  std::smatch m;
  while (std::getline(in, line)) {
    if (const size_t c = line.find("//"); c != std::string::npos) line.resize(c);
    if (std::regex_search(line, m, message)) {
      current = m[1];
    } else if (line.rfind("}", 0) == 0) {
      current.clear();
    } else if (!current.empty() && std::regex_search(line, m, field)) {
      const std::string type = m[2];
      out[current][m[3]] = {type.rfind("map<", 0) == 0 ? "map" : m[1].str(), ShortType(type),
                            std::stoi(m[4])};
    }
  }
  return out;
}

// The version of `module` in the harness's go.mod ("v0.37.2").
std::string ModuleVersion(const std::string& module) {
  std::istringstream in(Read(fs::path(TESSERA_SOURCE_DIR) / "test/controlplane/go.mod"));
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::string name, version;
    words >> name >> version;
    if (name == module) return version;
  }
  return "";
}

TEST(ProtobufFields, EveryFieldMatchesKubernetesGeneratedProto) {
  const char* cache = std::getenv("TESSERA_CACHE_DIR");
  const char* home = std::getenv("HOME");
  const fs::path gomod =
      fs::path(cache != nullptr ? cache : std::string(home ? home : "/root") + "/.cache/tessera") /
      "controlplane/gomod";
  const std::string api = ModuleVersion("k8s.io/api");
  const std::string machinery = ModuleVersion("k8s.io/apimachinery");
  ASSERT_FALSE(api.empty() || machinery.empty()) << "test/controlplane/go.mod names no k8s.io/api";
  const fs::path core = gomod / ("k8s.io/api@" + api) / "core/v1/generated.proto";
  const fs::path am = gomod / ("k8s.io/apimachinery@" + machinery);
  ASSERT_TRUE(fs::exists(core)) << core << ": build the test harness (test/controlplane/build.sh)";
  // Where each of our messages lives upstream.
  const Messages upstream_core = Parse(Read(core));
  const Messages runtime = Parse(Read(am / "pkg/runtime/generated.proto"));
  const Messages meta = Parse(Read(am / "pkg/apis/meta/v1/generated.proto"));
  const Messages resource = Parse(Read(am / "pkg/api/resource/generated.proto"));
  auto home_of = [&](const std::string& name) -> const Messages& {
    if (name == "TypeMeta" || name == "Unknown" || name == "RawExtension") return runtime;
    if (name == "Quantity") return resource;
    if (meta.contains(name)) return meta;
    return upstream_core;
  };
  const Messages ours =
      Parse(Read(fs::path(TESSERA_SOURCE_DIR) / "src/k8s/client/proto/k8s_core.proto"));
  ASSERT_GE(ours.size(), 30u);
  int fields = 0;
  for (const auto& [name, our_fields] : ours) {
    const Messages& theirs = home_of(name);
    auto it = theirs.find(name);
    ASSERT_NE(it, theirs.end()) << "message " << name << " is not in Kubernetes' generated.proto";
    for (const auto& [field, f] : our_fields) {
      SCOPED_TRACE(name + "." + field);
      auto t = it->second.find(field);
      ASSERT_NE(t, it->second.end()) << "no such field upstream";
      EXPECT_EQ(f.number, t->second.number);
      EXPECT_EQ(f.label, t->second.label);
      EXPECT_EQ(f.type, t->second.type);
      ++fields;
    }
  }
  EXPECT_GE(fields, 80);
  std::cerr << ours.size() << " messages, " << fields << " fields checked against " << core << "\n";
}

}  // namespace
}  // namespace tessera::k8s
