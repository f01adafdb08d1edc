// Status helpers shared by every module.
//
// Recoverable errors are absl::Status / absl::StatusOr<T>. Broken invariants are TESSERA_CHECK
// failures: they abort with the file, line and the condition, because continuing would corrupt
// allocation state (a GPU granted twice is worse than a crash).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define TESSERA_STATUS_CONCAT_INNER(a, b) a##b
#define TESSERA_STATUS_CONCAT(a, b) TESSERA_STATUS_CONCAT_INNER(a, b)

// Returns from the enclosing function if `expr` (an absl::Status) is not OK.
#define TESSERA_RETURN_IF_ERROR(expr)                  \
  do {                                                 \
    ::absl::Status tessera_status_ = (expr);           \
    if (!tessera_status_.ok()) return tessera_status_; \
  } while (false)

// `lhs = value of expr` if expr (an absl::StatusOr) is OK, else returns its status.
#define TESSERA_ASSIGN_OR_RETURN(lhs, expr) \
  TESSERA_ASSIGN_OR_RETURN_IMPL(TESSERA_STATUS_CONCAT(tessera_statusor_, __LINE__), lhs, expr)
#define TESSERA_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return std::move(tmp).status();      \
  lhs = std::move(tmp).value()

namespace tessera::internal {
[[noreturn]] inline void CheckFailed(const char* file, int line, const char* condition,
                                     const char* message) {
  std::fprintf(stderr, "%s:%d: CHECK failed: %s%s%s\n", file, line, condition,
               message[0] ? ": " : "", message);
  std::fflush(stderr);
  std::abort();
}
}  // namespace tessera::internal

// Always on, also in release builds: these guard allocation invariants.
#define TESSERA_CHECK(cond)                                            \
  do {                                                                 \
    if (!(cond)) [[unlikely]]                                          \
      ::tessera::internal::CheckFailed(__FILE__, __LINE__, #cond, ""); \
  } while (false)

#define TESSERA_CHECK_MSG(cond, msg)                                      \
  do {                                                                    \
    if (!(cond)) [[unlikely]]                                             \
      ::tessera::internal::CheckFailed(__FILE__, __LINE__, #cond, (msg)); \
  } while (false)
