// What the DRA plugin reads back from its own files after a restart: the checkpoint of prepared
// claims and the CDI specs it wrote. A file truncated by a crash, or written by another version,
// must never crash the plugin: reading any bytes is an error or a state that survives a write
// and a read unchanged.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "agent/dra/cdi.h"
#include "agent/dra/checkpoint.h"

namespace {

// A private scratch directory for this process.
const std::string& Dir() {
  static const std::string* dir = [] {
    char tmpl[] = "/tmp/tessera-dra-fuzz-XXXXXX";
    return new std::string(::mkdtemp(tmpl) != nullptr ? tmpl : "/tmp");
  }();
  return *dir;
}

void Write(const std::string& path, std::string_view bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace dra = tessera::agent::dra;
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const std::string checkpoint_path = Dir() + "/checkpoint.json";
  Write(checkpoint_path, bytes);
  dra::Checkpoint checkpoint(checkpoint_path);
  if (auto state = checkpoint.Load("node-a"); state.ok()) {
    if (!checkpoint.Save("node-a", *state).ok()) std::abort();
    auto again = checkpoint.Load("node-a");
    if (!again.ok() || again->claims != state->claims ||
        again->mig_instances != state->mig_instances) {
      std::abort();
    }
  }
  const std::string cdi_path = Dir() + "/k8s.gpu.tessera.dev-gpu_x.json";
  Write(cdi_path, bytes);
  if (auto spec = dra::ReadCdiSpec(cdi_path); spec.ok()) {
    auto again = dra::CdiSpecFromJson(dra::CdiSpecToJson(*spec));
    if (!again.ok() || dra::CdiSpecToJson(*again) != dra::CdiSpecToJson(*spec)) std::abort();
  }
  return 0;
}
