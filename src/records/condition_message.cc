#include "records/condition_message.h"

#include "common/strings.h"

namespace tessera::records {

absl::Status BadConditionMessage(std::string_view condition, std::string_view text,
                                 std::string_view why) {
  return absl::InvalidArgumentError(
      StrCat("condition ", condition, " message: \"", text, "\": ", why));
}

}  // namespace tessera::records
