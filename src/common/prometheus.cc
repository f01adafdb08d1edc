#include "common/prometheus.h"

#include <cmath>

#include "common/status.h"
#include "common/strings.h"

namespace tessera::prometheus {
namespace {

bool ValidName(std::string_view name, bool colons) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colons && c == ':');
    const bool digit = c >= '0' && c <= '9';
    if (!alpha && !(digit && i > 0)) return false;
  }
  return true;
}

// Suffixes the writer adds itself, or that belong to other types.
bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

std::string_view TypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string EscapeHelp(std::string_view help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", value);
}

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {
  for (size_t i = 1; i < bounds_.size(); ++i) TESSERA_CHECK(bounds_[i - 1] < bounds_[i]);
}

void Histogram::Observe(double value) {
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_[i];
  sum_ += value;
  ++count_;
}

int64_t Histogram::count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return count_;
}

Histogram::Snapshot Histogram::Take() const {
  std::lock_guard<std::mutex> lock(mu_);
  return Snapshot{bounds_, counts_, sum_, count_};
}

Exposition::Samples Exposition::Family(FamilySpec spec) {
  TESSERA_CHECK_MSG(ValidName(spec.name, true), spec.name.c_str());
  for (const FamilySpec& f : families_) TESSERA_CHECK_MSG(f.name != spec.name, spec.name.c_str());
  // The suffixes of a histogram's series, and counters' _total, are the type's own.
  TESSERA_CHECK_MSG((spec.type == MetricType::kCounter) == EndsWith(spec.name, "_total"),
                    spec.name.c_str());
  for (std::string_view suffix : {"_bucket", "_count", "_sum"}) {
    TESSERA_CHECK_MSG(!EndsWith(spec.name, suffix), spec.name.c_str());
  }
  TESSERA_CHECK_MSG(!spec.help.empty(), spec.name.c_str());
  for (size_t i = 0; i < spec.labels.size(); ++i) {
    const std::string& l = spec.labels[i];
    TESSERA_CHECK_MSG(ValidName(l, false) && !l.starts_with("__") && l != "le", l.c_str());
    for (size_t j = 0; j < i; ++j) TESSERA_CHECK_MSG(spec.labels[j] != l, l.c_str());
  }
  StrAppend(&text_, "# HELP ", spec.name, " ", EscapeHelp(spec.help), "\n# TYPE ", spec.name, " ",
            TypeName(spec.type), "\n");
  families_.push_back(std::move(spec));
  return Samples(this, families_.size() - 1);
}

void Exposition::Samples::Labels(std::string* line, std::initializer_list<std::string_view> values,
                                 std::string_view le) const {
  const FamilySpec& spec = out_->families_[family_];
  TESSERA_CHECK_MSG(values.size() == spec.labels.size(), spec.name.c_str());
  std::string inner;
  size_t i = 0;
  for (std::string_view v : values) {
    // An empty value is no label at all to Prometheus: left out.
    if (!v.empty()) {
      StrAppend(&inner, inner.empty() ? "" : ",", spec.labels[i], "=\"", EscapeLabelValue(v), "\"");
    }
    ++i;
  }
  if (!le.empty()) StrAppend(&inner, inner.empty() ? "" : ",", "le=\"", le, "\"");
  if (!inner.empty()) StrAppend(line, "{", inner, "}");
}

void Exposition::Samples::AddValue(std::initializer_list<std::string_view> values,
                                   const std::string& value) {
  const FamilySpec& spec = out_->families_[family_];
  TESSERA_CHECK_MSG(spec.type != MetricType::kHistogram, spec.name.c_str());
  std::string& out = out_->text_;
  out += spec.name;
  Labels(&out, values, "");
  StrAppend(&out, " ", value, "\n");
}

void Exposition::Samples::Add(std::initializer_list<std::string_view> values,
                              const Histogram& histogram) {
  const FamilySpec& spec = out_->families_[family_];
  TESSERA_CHECK_MSG(spec.type == MetricType::kHistogram, spec.name.c_str());
  const Histogram::Snapshot h = histogram.Take();
  std::string& out = out_->text_;
  int64_t cumulative = 0;
  for (size_t i = 0; i <= h.bounds.size(); ++i) {
    cumulative += h.counts[i];
    StrAppend(&out, spec.name, "_bucket");
    Labels(&out, values, i < h.bounds.size() ? FormatValue(h.bounds[i]) : "+Inf");
    StrAppend(&out, " ", cumulative, "\n");
  }
  StrAppend(&out, spec.name, "_sum");
  Labels(&out, values, "");
  StrAppend(&out, " ", FormatValue(h.sum), "\n", spec.name, "_count");
  Labels(&out, values, "");
  StrAppend(&out, " ", h.count, "\n");
}

void WriteBuildInfo(Exposition& out, const BuildInfo& build) {
  out.Family({"tessera_build_info",
              MetricType::kGauge,
              "Always 1: the tessera release (version) and the git description of the sources "
              "(revision) this program was built from, as `tessera --version` prints them.",
              {"version", "revision"}})
      .Add({build.version, build.revision}, 1);
}

}  // namespace tessera::prometheus
