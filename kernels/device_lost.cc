#include "kernels/device_lost.h"

#include "absl/strings/cord.h"

namespace linfer {
namespace {

constexpr absl::string_view kPayload = "type.linfer.dev/device_lost";

}  // namespace

absl::Status DeviceLostError(absl::string_view message, absl::string_view cause) {
  absl::Status st = absl::InternalError(message);
  st.SetPayload(kPayload, absl::Cord(cause));
  return st;
}

bool IsDeviceLost(const absl::Status& status) {
  return !status.ok() && status.GetPayload(kPayload).has_value();
}

std::string DeviceLostCause(const absl::Status& status) {
  if (!IsDeviceLost(status)) return "";
  return std::string(*status.GetPayload(kPayload));
}

}  // namespace linfer
