// tessera's GPU model name for the product name NVML reports ("NVIDIA H100 80GB HBM3" ->
// "H100-80GB"), so that the inventory's model matches the names of core/model/profiles.h (memory,
// SM count, NVLink generation) and core/model/mig.h (MIG tables). Products tessera has no name for
// keep theirs, made safe for a label value: vendor prefix dropped, spaces as '-' ("NVIDIA GeForce
// RTX 4090" -> "GeForce-RTX-4090").
#pragma once

#include <string>
#include <string_view>

namespace tessera::agent {

std::string ModelFromProductName(std::string_view product_name);

// A Kubernetes label value: at most 63 characters of [A-Za-z0-9._-], starting and ending with an
// alphanumeric (others replaced by '-', trimmed). Empty in, empty out.
std::string LabelSafe(std::string_view value);

}  // namespace tessera::agent
