// `tessera topo` as a user runs it: parse real `nvidia-smi topo -m` samples into the inventory
// JSON, errors with line and column and exit status 2, the profile list.
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "run_tessera.h"

namespace {

using ::testing::HasSubstr;

using tessera::cli_testing::Output;

Output Tessera(const std::string& args, bool with_stderr = true) {
  using tessera::cli_testing::Stderr;
  return tessera::cli_testing::RunTessera(args, with_stderr ? Stderr::kMerged : Stderr::kDiscarded);
}

std::string Sample(const std::string& name) {
  return std::string(TESSERA_SOURCE_DIR) + "/src/core/topology/testdata/" + name;
}

TEST(TopoCli, ParsePrintsTheInventory) {
  Output r = Tessera("topo parse " + Sample("dgx_a100.txt") + " --model A100-80GB", false);
  ASSERT_EQ(r.status, 0) << r.out;
  nlohmann::json doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["version"], 1);
  ASSERT_EQ(doc["gpus"].size(), 8u);
  EXPECT_EQ(doc["gpus"][4]["numa_node"], 7);
  EXPECT_EQ(doc["gpus"][4]["cpu_affinity"], "112-127,240-255");
  EXPECT_EQ(doc["gpus"][0]["memory_mib"], 81920);
  EXPECT_EQ(doc["links"][0][7], "NV12");
  ASSERT_EQ(doc["nics"].size(), 10u);
  EXPECT_EQ(doc["nics"][3]["device"], "mlx5_3");
  EXPECT_EQ(doc["nics"][3]["links"][2], "PXB");
}

TEST(TopoCli, ParseEverySampleAndStdin) {
  for (const char* f :
       {"hgx_h100.txt", "pcie_2socket_mlx5.txt", "pcie_4090_2socket.txt", "l40s_4gpu.txt"}) {
    Output r = Tessera(std::string("topo parse --compact --model L40S-48GB ") + Sample(f), false);
    ASSERT_EQ(r.status, 0) << f << r.out;
    EXPECT_EQ(r.out.find('\n'), r.out.size() - 1) << f;  // one line
  }
  Output in = Tessera("topo parse - --model H100-80GB --mig < " + Sample("hgx_h100.txt"), false);
  ASSERT_EQ(in.status, 0);
  EXPECT_EQ(nlohmann::json::parse(in.out)["gpus"][7]["mig"]["enabled"], true);
}

TEST(TopoCli, ErrorsNameLineAndColumnAndExitTwo) {
  std::string path = ::testing::TempDir() + "/bad_topo.txt";
  std::ofstream(path) << "\tGPU0\tGPU1\nGPU0\t X \tNV4\nGPU1\tNV2\t X \n";
  Output r = Tessera("topo parse " + path + " --model A100-80GB");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.out, HasSubstr("bad_topo.txt: nvidia-smi topo text, line 3, column 6: GPU1 to "
                               "GPU0 is NV2 but GPU0 to GPU1 is NV4"));
  Output no_model = Tessera("topo parse " + Sample("hgx_h100.txt"));
  EXPECT_EQ(no_model.status, 2);
  EXPECT_THAT(no_model.out, HasSubstr("--model is required"));
  Output unknown = Tessera("topo parse " + Sample("hgx_h100.txt") + " --model X9000");
  EXPECT_EQ(unknown.status, 2);
  EXPECT_THAT(unknown.out, HasSubstr("--memory is required for X9000"));
  EXPECT_EQ(Tessera("topo parse " + Sample("hgx_h100.txt") + " --model X9000 --memory 96Gi").status,
            0);
  Output mig = Tessera("topo parse " + Sample("l40s_4gpu.txt") + " --model L40S-48GB --mig");
  EXPECT_EQ(mig.status, 2);
  EXPECT_THAT(mig.out, HasSubstr("no MIG profiles for L40S-48GB"));
  EXPECT_EQ(Tessera("topo parse /no/such/file --model A100-80GB").status, 2);
  EXPECT_EQ(Tessera("topo").status, 2);
}

TEST(TopoCli, Profiles) {
  Output list = Tessera("topo profiles");
  ASSERT_EQ(list.status, 0);
  for (const char* p : {"dgx-a100", "hgx-h100", "pcie-8gpu", "l40s-4gpu", "gb200-nvl72-tray"}) {
    EXPECT_THAT(list.out, HasSubstr(p));
  }
  Output one = Tessera("topo profiles hgx-h100", false);
  ASSERT_EQ(one.status, 0);
  nlohmann::json doc = nlohmann::json::parse(one.out);
  EXPECT_EQ(doc["links"][3][4], "NV18");
  EXPECT_EQ(doc["nics"][5]["links"][5], "PIX");
  EXPECT_EQ(Tessera("topo profiles nope").status, 2);
}

}  // namespace
