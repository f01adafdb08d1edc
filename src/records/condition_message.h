// Records kept in a pod condition's message (the Moving and Reserved conditions: move.h,
// reservation.h): the one error their readers give for a message they cannot read.
#pragma once

#include <string_view>

#include "absl/status/status.h"

namespace tessera::records {

// InvalidArgument `condition <condition> message: "<text>": <why>`, where `text` is the message
// or the part of it that breaks a rule, and `why` the rule.
absl::Status BadConditionMessage(std::string_view condition, std::string_view text,
                                 std::string_view why);

}  // namespace tessera::records
