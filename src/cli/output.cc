#include "cli/output.h"

#include "common/strings.h"

namespace tessera::cli {

void AddOutputFlags(CLI::App* cmd, OutputFlags* flags, std::vector<std::string> formats,
                    std::string_view doc) {
  flags->format = formats.front();
  cmd->add_option(
         "-o,--output", flags->format,
         StrCat("Output format: ", StrJoin(formats, ", "), " (json: one document, described in ",
                doc, "; fields are only ever added)"))
      ->check(CLI::IsMember(formats))
      ->capture_default_str();
  cmd->add_flag_callback(
      "--json", [flags] { flags->format = "json"; }, "Same as -o json");
}

}  // namespace tessera::cli
