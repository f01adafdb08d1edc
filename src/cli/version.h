// The build of this binary: the release (the project's version in CMakeLists.txt, which is the
// Helm chart's appVersion, checked when the build is configured) and the git description of the
// sources, written at build time by cmake/version.cmake. `tessera --version` prints both; the
// scheduler and the agent serve them as tessera_build_info{version,revision}.
#pragma once

#include <string>

#include "common/prometheus.h"

namespace tessera::cli {

prometheus::BuildInfo CurrentBuild();
// "tessera 0.1.0 (4f62cbd)".
std::string VersionLine();

}  // namespace tessera::cli
