// `-o/--output` for every command that prints: one flag, one spelling of its values, and `--json`
// kept as an alias of `-o json` (older scripts use it).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "CLI/CLI.hpp"

namespace tessera::cli {

struct OutputFlags {
  std::string format;  // one of the formats given to AddOutputFlags
  bool json() const { return format == "json"; }
};

// Adds `-o,--output FORMAT` (one of `formats`, the first the default) and `--json` to `cmd`;
// `doc` names the page that describes the JSON document.
void AddOutputFlags(CLI::App* cmd, OutputFlags* flags,
                    std::vector<std::string> formats = {"text", "json"},
                    std::string_view doc = "docs/kubectl-plugin.md");

}  // namespace tessera::cli
