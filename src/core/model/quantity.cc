#include "core/model/quantity.h"

#include <cctype>
#include <limits>

#include "common/strings.h"

namespace tessera::core {
namespace {

__extension__ typedef unsigned __int128 u128;

// value = mantissa * 10^dec_exp * 2^bin_exp, all exact.
struct Exact {
  bool negative = false;
  u128 mantissa = 0;
  int dec_exp = 0;
  int bin_exp = 0;
};

absl::Status Invalid(std::string_view text, std::string_view why) {
  return absl::InvalidArgumentError(
      StrCat("invalid quantity \"", text, "\": ", why,
             " (expected a number with an optional suffix such as 500m, 4Gi, 2G, 1.5)"));
}

absl::StatusOr<Exact> ParseExact(std::string_view text) {
  Exact q;
  size_t i = 0;
  const size_t n = text.size();
  if (n == 0) return Invalid(text, "empty");
  if (text[i] == '+' || text[i] == '-') {
    q.negative = text[i] == '-';
    ++i;
  }
  bool digits = false;
  constexpr u128 kMax = static_cast<u128>(1) << 100;
  for (; i < n && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
    digits = true;
    if (q.mantissa > kMax) return Invalid(text, "too large");
    q.mantissa = q.mantissa * 10 + (text[i] - '0');
  }
  if (i < n && text[i] == '.') {
    ++i;
    for (; i < n && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
      digits = true;
      if (q.mantissa > kMax) return Invalid(text, "too many digits");
      q.mantissa = q.mantissa * 10 + (text[i] - '0');
      --q.dec_exp;
    }
  }
  if (!digits) return Invalid(text, "no digits");
  std::string_view suffix = text.substr(i);
  if (suffix.empty()) return q;
  struct Suffix {
    std::string_view name;
    int dec;
    int bin;
  };
  static constexpr Suffix kSuffixes[] = {
      {"Ki", 0, 10}, {"Mi", 0, 20}, {"Gi", 0, 30}, {"Ti", 0, 40}, {"Pi", 0, 50},
      {"Ei", 0, 60}, {"n", -9, 0},  {"u", -6, 0},  {"m", -3, 0},  {"k", 3, 0},
      {"M", 6, 0},   {"G", 9, 0},   {"T", 12, 0},  {"P", 15, 0},  {"E", 18, 0},
  };
  for (const Suffix& s : kSuffixes) {
    if (suffix == s.name) {
      q.dec_exp += s.dec;
      q.bin_exp += s.bin;
      return q;
    }
  }
  if (suffix[0] == 'e' || suffix[0] == 'E') {
    std::string_view exp = suffix.substr(1);
    bool neg = false;
    if (!exp.empty() && (exp[0] == '+' || exp[0] == '-')) {
      neg = exp[0] == '-';
      exp.remove_prefix(1);
    }
    if (exp.empty() || exp.size() > 3) return Invalid(text, "bad exponent");
    int e = 0;
    for (char c : exp) {
      if (!std::isdigit(static_cast<unsigned char>(c))) return Invalid(text, "bad exponent");
      e = e * 10 + (c - '0');
    }
    q.dec_exp += neg ? -e : e;
    return q;
  }
  return Invalid(text, StrCat("unknown suffix \"", suffix, "\""));
}

// Converts to an integer count of `unit_dec` (power of ten) * `unit_bin` (power of two) units.
absl::StatusOr<int64_t> ToUnits(std::string_view text, int unit_dec, int unit_bin,
                                Rounding rounding) {
  absl::StatusOr<Exact> parsed = ParseExact(text);
  if (!parsed.ok()) return parsed.status();
  Exact q = *parsed;
  if (q.negative && q.mantissa != 0) return Invalid(text, "must not be negative");
  int dec = q.dec_exp - unit_dec;
  int bin = q.bin_exp - unit_bin;
  u128 num = q.mantissa;
  u128 den = 1;
  constexpr u128 kLimit = static_cast<u128>(1) << 120;
  for (; dec > 0; --dec) {
    num *= 10;
    if (num > kLimit) return Invalid(text, "too large");
  }
  for (; dec < 0; ++dec) {
    den *= 10;
    if (den > kLimit) return Invalid(text, "too many decimal places");
  }
  for (; bin > 0; --bin) {
    num <<= 1;
    if (num > kLimit) return Invalid(text, "too large");
  }
  for (; bin < 0; ++bin) {
    den <<= 1;
    if (den > kLimit) return Invalid(text, "too small a unit");
  }
  u128 result = num / den;
  if (rounding == Rounding::kUp && num % den != 0) ++result;
  if (result > static_cast<u128>(std::numeric_limits<int64_t>::max())) {
    return Invalid(text, "too large");
  }
  return static_cast<int64_t>(result);
}

}  // namespace

absl::StatusOr<int64_t> ParseMemoryMiB(std::string_view text, Rounding rounding) {
  return ToUnits(text, 0, 20, rounding);
}

absl::StatusOr<int64_t> ParseCpuMilli(std::string_view text, Rounding rounding) {
  return ToUnits(text, -3, 0, rounding);
}

absl::StatusOr<int64_t> ParseCount(std::string_view text) {
  absl::StatusOr<int64_t> down = ToUnits(text, 0, 0, Rounding::kDown);
  if (!down.ok()) return down.status();
  absl::StatusOr<int64_t> up = ToUnits(text, 0, 0, Rounding::kUp);
  if (!up.ok()) return up.status();
  if (*down != *up) return Invalid(text, "must be a whole number");
  return *down;
}

std::string FormatMiB(int64_t mib) {
  if (mib >= 1024 && mib % 1024 == 0) return StrCat(mib / 1024, "Gi");
  if (mib >= 1024 && (mib * 10) % 1024 == 0) return fmt::format("{:.1f}Gi", mib / 1024.0);
  if (mib >= 10 * 1024) return fmt::format("{:.1f}Gi", mib / 1024.0);
  return StrCat(mib, "Mi");
}

}  // namespace tessera::core
