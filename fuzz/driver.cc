// A main() for fuzz targets built without libFuzzer (gcc, CI): runs every file given on the
// command line (or in the directories given) through LLVMFuzzerTestOneInput, then a number of
// deterministic mutations of each (2000, or N with --mutations=N: a target whose every run makes
// files and threads takes fewer), so that CI exercises the parsers on odd input every run.
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

// The input being run, written out if it crashes so that it can be replayed and kept.
const std::string* g_current = nullptr;

void OnCrash(int sig) {
  if (g_current) {
    std::FILE* f = std::fopen("crash-input", "wb");
    if (f) {
      std::fwrite(g_current->data(), 1, g_current->size(), f);
      std::fclose(f);
    }
    std::fprintf(stderr, "crash on an input of %zu bytes, written to ./crash-input\n",
                 g_current->size());
  }
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

void RunOne(const std::string& bytes) {
  g_current = &bytes;
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

std::string Mutate(std::string s, std::mt19937_64& rng) {
  static const char* kTokens[] = {"\t",    "\n", " ",  ":",  "-",    "{",
                                  "}",     "[",  "]",  "\"", "0",    "-1",
                                  "1e999", "Gi", "NV", "X",  "null", "9999999999999999999"};
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < edits; ++e) {
    size_t pos = s.empty() ? 0 : rng() % (s.size() + 1);
    switch (rng() % 4) {
      case 0:
        if (!s.empty() && pos < s.size()) s.erase(pos, 1 + rng() % 8);
        break;
      case 1:
        s.insert(pos, kTokens[rng() % (sizeof(kTokens) / sizeof(kTokens[0]))]);
        break;
      case 2:
        if (!s.empty() && pos < s.size()) s[pos] = static_cast<char>(rng() % 256);
        break;
      default:
        if (!s.empty()) s.insert(pos, s.substr(rng() % s.size(), 1 + rng() % 16));
        break;
    }
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  std::signal(SIGABRT, OnCrash);
  std::signal(SIGSEGV, OnCrash);
  std::vector<std::string> inputs;
  int mutations = 2000;
  for (int i = 1; i < argc; ++i) {
    if (std::string arg = argv[i]; arg.rfind("--mutations=", 0) == 0) {
      mutations = std::stoi(arg.substr(12));
      continue;
    }
    std::filesystem::path p(argv[i]);
    std::vector<std::filesystem::path> files;
    if (std::filesystem::is_directory(p)) {
      for (const auto& e : std::filesystem::directory_iterator(p)) files.push_back(e.path());
    } else {
      files.push_back(p);
    }
    for (const auto& f : files) {
      std::ifstream in(f, std::ios::binary);
      std::stringstream ss;
      ss << in.rdbuf();
      inputs.push_back(ss.str());
    }
  }
  inputs.push_back("");
  std::mt19937_64 rng(12345);
  size_t runs = 0;
  for (const std::string& in : inputs) {
    RunOne(in);
    ++runs;
    for (int m = 0; m < mutations; ++m, ++runs) {
      std::string mutated = Mutate(in, rng);
      RunOne(mutated);
    }
  }
  std::printf("%zu inputs, %zu runs, no crash\n", inputs.size(), runs);
  return 0;
}
