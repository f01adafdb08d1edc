#include "common/prometheus.h"

#include <cmath>
#include <limits>

#include "common/testing/promtool.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::prometheus {
namespace {

using ::testing::HasSubstr;

TEST(Exposition, WritesFamiliesWithTheirHelpTypeAndLabels) {
  Exposition e;
  auto pods = e.Family({"tessera_agent_gpu_pods",
                        MetricType::kGauge,
                        "Pods the agent has given this GPU to",
                        {"node", "gpu"}});
  pods.Add({"node-a", "0"}, 3);
  pods.Add({"node-a", "1"}, size_t{0});
  e.Scalar({"tessera_x_ratio", MetricType::kGauge, "A ratio."}, 0.25);
  e.Scalar({"tessera_x_total", MetricType::kCounter, "Things."}, int64_t{7});
  EXPECT_EQ(e.text(),
            "# HELP tessera_agent_gpu_pods Pods the agent has given this GPU to\n"
            "# TYPE tessera_agent_gpu_pods gauge\n"
            "tessera_agent_gpu_pods{node=\"node-a\",gpu=\"0\"} 3\n"
            "tessera_agent_gpu_pods{node=\"node-a\",gpu=\"1\"} 0\n"
            "# HELP tessera_x_ratio A ratio.\n"
            "# TYPE tessera_x_ratio gauge\n"
            "tessera_x_ratio 0.25\n"
            "# HELP tessera_x_total Things.\n"
            "# TYPE tessera_x_total counter\n"
            "tessera_x_total 7\n");
  ASSERT_EQ(e.families().size(), 3u);
  EXPECT_EQ(e.families()[0].labels, (std::vector<std::string>{"node", "gpu"}));
  EXPECT_TRUE(testing::PromtoolCheckMetrics(e.text()).ok())
      << testing::PromtoolCheckMetrics(e.text());
}

TEST(Exposition, EscapesLabelValuesAndHelp) {
  Exposition e;
  e.Family({"tessera_x", MetricType::kGauge, "Line one\nback\\slash \"quoted\"", {"pod"}})
      .Add({"a\"b\\c\nd"}, 1);
  EXPECT_EQ(e.text(),
            "# HELP tessera_x Line one\\nback\\\\slash \"quoted\"\n"
            "# TYPE tessera_x gauge\n"
            "tessera_x{pod=\"a\\\"b\\\\c\\nd\"} 1\n");
  EXPECT_TRUE(testing::PromtoolCheckMetrics(e.text()).ok())
      << testing::PromtoolCheckMetrics(e.text());
}

// An empty label value is no label to Prometheus; the writer leaves it out.
TEST(Exposition, LeavesOutEmptyLabels) {
  Exposition e;
  auto f = e.Family({"tessera_x", MetricType::kGauge, "Maybe MIG.", {"pod", "mig"}});
  f.Add({"p", ""}, 1);
  f.Add({"", ""}, 2);
  f.Add({"p", "1g.10gb@0"}, 3);
  EXPECT_THAT(e.text(), HasSubstr("\ntessera_x{pod=\"p\"} 1\ntessera_x 2\n"
                                  "tessera_x{pod=\"p\",mig=\"1g.10gb@0\"} 3\n"));
}

TEST(Exposition, WritesSpecialDoubles) {
  EXPECT_EQ(FormatValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatValue(std::nan("")), "NaN");
  EXPECT_EQ(FormatValue(1e-05), "1e-05");
  EXPECT_EQ(FormatValue(4096.0 * 1048576), "4294967296");
}

TEST(Exposition, WritesCumulativeHistograms) {
  Histogram h({0.1, 1});
  h.Observe(0.05);
  h.Observe(0.5);
  h.Observe(0.5);
  h.Observe(7);
  Exposition e;
  e.Family({"tessera_x_seconds", MetricType::kHistogram, "Durations.", {"phase"}}).Add({"bind"}, h);
  EXPECT_EQ(e.text(),
            "# HELP tessera_x_seconds Durations.\n"
            "# TYPE tessera_x_seconds histogram\n"
            "tessera_x_seconds_bucket{phase=\"bind\",le=\"0.1\"} 1\n"
            "tessera_x_seconds_bucket{phase=\"bind\",le=\"1\"} 3\n"
            "tessera_x_seconds_bucket{phase=\"bind\",le=\"+Inf\"} 4\n"
            "tessera_x_seconds_sum{phase=\"bind\"} 8.05\n"
            "tessera_x_seconds_count{phase=\"bind\"} 4\n");
  EXPECT_EQ(h.count(), 4);
  EXPECT_TRUE(testing::PromtoolCheckMetrics(e.text()).ok())
      << testing::PromtoolCheckMetrics(e.text());
}

TEST(Exposition, WritesBuildInfo) {
  Exposition e;
  WriteBuildInfo(e, {"0.1.0", "4f62cbd-dirty"});
  EXPECT_THAT(e.text(),
              HasSubstr("\ntessera_build_info{version=\"0.1.0\",revision=\"4f62cbd-dirty\"} 1\n"));
  EXPECT_TRUE(testing::PromtoolCheckMetrics(e.text()).ok())
      << testing::PromtoolCheckMetrics(e.text());
}

// The rules the writer keeps are programming errors, caught by the first render.
TEST(ExpositionDeathTest, RefusesWhatPrometheusWouldNot) {
  EXPECT_DEATH(Exposition().Family({"tessera_x", MetricType::kCounter, "No _total."}), "tessera_x");
  EXPECT_DEATH(Exposition().Family({"tessera_x_total", MetricType::kGauge, "A gauge."}),
               "tessera_x_total");
  EXPECT_DEATH(Exposition().Family({"tessera-x", MetricType::kGauge, "Bad name."}), "tessera-x");
  EXPECT_DEATH(Exposition().Family({"tessera_x", MetricType::kGauge, "Bad label.", {"le"}}), "le");
  EXPECT_DEATH(
      {
        Exposition e;
        e.Family({"tessera_x", MetricType::kGauge, "Twice."});
        e.Family({"tessera_x", MetricType::kGauge, "Twice."});
      },
      "tessera_x");
  EXPECT_DEATH(
      {
        Exposition e;
        e.Family({"tessera_x", MetricType::kGauge, "Two labels.", {"a", "b"}}).Add({"1"}, 1);
      },
      "tessera_x");
}

// The check the tests rely on is not vacuous: promtool refuses what its linter knows is wrong.
TEST(Promtool, FindsProblems) {
  const absl::Status s = testing::PromtoolCheckMetrics(
      "# HELP tessera_x_milliseconds A duration in a non-base unit.\n"
      "# TYPE tessera_x_milliseconds gauge\n"
      "tessera_x_milliseconds 3\n");
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("tessera_x_milliseconds"));
  EXPECT_FALSE(testing::PromtoolCheckMetrics("tessera_x{ 3\n").ok());
}

}  // namespace
}  // namespace tessera::prometheus
