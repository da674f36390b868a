// The one place absl::Status becomes grpc::Status (the codes are numerically the same).
#pragma once

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace linfer {

grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace linfer
