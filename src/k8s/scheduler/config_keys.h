// Every key of the scheduler's configuration file (config.h), with its type, its default (read
// from a default SchedulerConfig, so it is what the scheduler really uses), an example and what
// it does. The one list: the parser accepts exactly these keys (KeysUnder, for each map it
// reads) and docs/configuration.md is generated from it (docs_reference_test fails when the page
// and the list differ; config_test parses each key's example).
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::k8s {

struct ConfigKey {
  std::string path;  // "leaderElection.leaseDuration"; a list's items: "topologyLevels[].name"
  std::string type;  // "duration", "string", "boolean", "integer 1..1024", "list", "map", ...
  std::string default_value;  // as the file would write it; "" none
  std::string example;        // YAML for the key's value (config_test parses each)
  std::string description;
};

const std::vector<ConfigKey>& SchedulerConfigKeys();

// The keys directly under `parent` ("" the top level, "leaderElection", "topologyLevels[]").
std::vector<std::string_view> KeysUnder(std::string_view parent);

// "500ms", "15s", "2m", "24h": a duration as the file writes it.
std::string FormatDuration(std::chrono::milliseconds d);

}  // namespace tessera::k8s
