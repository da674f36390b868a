// The project's only macros: early returns on absl::Status / absl::StatusOr errors.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define LINFER_CONCAT_INNER_(a, b) a##b
#define LINFER_CONCAT_(a, b) LINFER_CONCAT_INNER_(a, b)

// Returns from the current function if `expr` (an absl::Status) is not OK.
#define RETURN_IF_ERROR(expr)                        \
  do {                                               \
    ::absl::Status linfer_status_ = (expr);          \
    if (!linfer_status_.ok()) return linfer_status_; \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, F())`: assigns the value of an absl::StatusOr or returns its error.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL_(LINFER_CONCAT_(linfer_statusor_, __COUNTER__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                           \
  if (!tmp.ok()) return tmp.status();          \
  lhs = std::move(tmp).value()
