// The one writer of the Prometheus text exposition format (version 0.0.4) that the scheduler's
// and the agent's /metrics use, so that every family follows the same rules and
// `promtool check metrics` passes on whatever either serves:
//
//   - a family is declared once, with its name, type, help and label names (FamilySpec), and
//     gets its HELP and TYPE lines even with no sample (a dashboard then finds the name);
//   - names and label names follow Prometheus' grammar, counters end in `_total`, values in base
//     units (`_bytes`, `_seconds`, ratios 0..1; GPU compute in whole GPUs, `_gpus`), one metric
//     per resource rather than a unit in a label value (docs/metrics.md, "Conventions");
//   - label values and help text are escaped; doubles are written as Prometheus reads them
//     (+Inf, -Inf, NaN);
//   - a sample has exactly the family's labels, in the declared order (a label whose value is
//     empty is left out, as Prometheus does: `mig` only on MIG instances, say).
// Breaking one of these is a programming error, caught by the first test that renders the
// family (TESSERA_CHECK); the data never can (any label value is escaped, any number written).
//
// The families written are kept (families()) for the metrics reference: docs_reference_test
// renders the scheduler's and the agent's metrics and checks docs/metrics.md against them.
//
// Example:
//   Exposition e;
//   auto pods = e.Family({"tessera_agent_gpu_pods", MetricType::kGauge,
//                         "Pods the agent has given this GPU to", {"node", "gpu", "uuid"}});
//   pods.Add({"node-a", "0", "GPU-1234"}, 3);
//   e.Scalar({"tessera_agent_reaped_processes_total", MetricType::kCounter, "..."}, 7);
//   std::string body = std::move(e).Text();
//
// Not thread-safe (one render at a time builds one Exposition); Histogram is.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace tessera::prometheus {

// A label value or help text escaped as the text format wants ("\\", "\"" (label values only),
// newline).
std::string EscapeLabelValue(std::string_view value);
std::string EscapeHelp(std::string_view help);
// A sample value: integers as they are, doubles shortest round-trip, +Inf, -Inf, NaN.
std::string FormatValue(double value);

enum class MetricType { kCounter, kGauge, kHistogram };
std::string_view TypeName(MetricType type);

// What a family is. `labels` are the label names its samples carry, in the order Add takes
// their values (a histogram's `le` is added by the writer).
struct FamilySpec {
  std::string name;
  MetricType type = MetricType::kGauge;
  std::string help;
  std::vector<std::string> labels;
};

// Observations into fixed buckets (cumulative when written). Thread-safe.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void Observe(double value);
  int64_t count() const;

  struct Snapshot {
    std::vector<double> bounds;
    std::vector<int64_t> counts;  // per bucket, not cumulative; last = +Inf
    double sum = 0;
    int64_t count = 0;
  };
  Snapshot Take() const;

 private:
  const std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<int64_t> counts_;
  double sum_ = 0;
  int64_t count_ = 0;
};

// What `tessera --version` says: the release (the project's version, which is the chart's
// appVersion) and the git description of the sources it was built from.
struct BuildInfo {
  std::string version;
  std::string revision;
};

class Exposition {
 public:
  // The samples of one family: valid until the Exposition is taken or destroyed.
  class Samples {
   public:
    // Any integer or floating-point value.
    template <typename T>
    requires std::is_arithmetic_v<T>
    void Add(std::initializer_list<std::string_view> values, T value) {
      if constexpr (std::is_integral_v<T>) {
        AddValue(values, StrOfInt(static_cast<int64_t>(value)));
      } else {
        AddValue(values, FormatValue(static_cast<double>(value)));
      }
    }
    // Histograms only: _bucket{...,le}, _sum and _count.
    void Add(std::initializer_list<std::string_view> values, const Histogram& histogram);

   private:
    friend class Exposition;
    Samples(Exposition* out, size_t family) : out_(out), family_(family) {}
    static std::string StrOfInt(int64_t v) { return std::to_string(v); }
    void AddValue(std::initializer_list<std::string_view> values, const std::string& value);
    void Labels(std::string* line, std::initializer_list<std::string_view> values,
                std::string_view le) const;
    Exposition* out_;
    size_t family_;
  };

  // Declares a family (HELP and TYPE) and returns where its samples go.
  Samples Family(FamilySpec spec);
  // A family of one sample without labels.
  template <typename T>
  requires std::is_arithmetic_v<T>
  void Scalar(FamilySpec spec, T value) { Family(std::move(spec)).Add({}, value); }

  // The families declared so far, in order.
  const std::vector<FamilySpec>& families() const { return families_; }
  const std::string& text() const { return text_; }
  std::string Text() && { return std::move(text_); }

 private:
  std::string text_;
  std::vector<FamilySpec> families_;
};

// tessera_build_info{version,revision} 1: the build serving the metrics.
void WriteBuildInfo(Exposition& out, const BuildInfo& build);

}  // namespace tessera::prometheus
