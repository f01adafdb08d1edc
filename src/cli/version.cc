#include "cli/version.h"

#include "common/strings.h"

namespace tessera::cli {

std::string VersionLine() {
  const prometheus::BuildInfo b = CurrentBuild();
  return StrCat("tessera ", b.version, " (", b.revision, ")");
}

}  // namespace tessera::cli
