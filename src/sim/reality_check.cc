#include "sim/reality_check.h"

namespace tessera::sim {

std::string_view RealityCheckClusterYaml() {
  return R"(# The reality check: 10 GPUs of 80Gi on two nodes.
nodes:
  - name: nvswitch-server
    cpu: 128
    memory: 1Ti
    gpus: {model: A100-80GB, count: 8, memory: 80Gi, interconnect: nvswitch}
  - name: pcie-server
    cpu: 32
    memory: 256Gi
    gpus: {model: A100-80GB, count: 2, memory: 80Gi, interconnect: pcie}
)";
}

namespace {

// Jobs as string-literal pieces so that part 3 is exactly parts 1 and 2 together.
#define TESSERA_INFERENCE_JOB \
  "  - name: inference\n"     \
  "    replicas: 20\n"        \
  "    cpu: 1\n"              \
  "    memory: 8Gi\n"         \
  "    gpu: {memory: 4Gi}\n"
#define TESSERA_TRAINING_JOB \
  "  - name: train\n"        \
  "    replicas: 8\n"        \
  "    cpu: 8\n"             \
  "    memory: 64Gi\n"       \
  "    gpu: {count: 1}\n"    \
  "    gang: {size: 8, topology: nvlink-domain, mode: required}\n"

}  // namespace

const std::vector<ScenarioPart>& RealityCheckParts() {
  static const std::vector<ScenarioPart> kParts = {
      {"Part 1: 20 inference pods, 4Gi of GPU memory each", "jobs:\n" TESSERA_INFERENCE_JOB},
      {"Part 2: a training job of 8 pods x 1 GPU, gang inside one NVLink domain",
       "jobs:\n" TESSERA_TRAINING_JOB},
      {"Part 3: both together (inference first, then training)",
       "jobs:\n" TESSERA_INFERENCE_JOB TESSERA_TRAINING_JOB},
  };
  return kParts;
}

#undef TESSERA_INFERENCE_JOB
#undef TESSERA_TRAINING_JOB

}  // namespace tessera::sim
