// Arena: bump allocation over device blocks.
#include "kernels/context.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace linfer {
namespace {

constexpr int64_t kAlign = 256;
constexpr int64_t kMinBlock = int64_t{1} << 20;

int64_t AlignUp(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

}  // namespace

absl::StatusOr<TensorView> Arena::Allocate(DType dtype, Shape shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return absl::InvalidArgumentError("negative dimension in " + ShapeString(shape));
    n *= d;
  }
  const int64_t bytes = AlignUp(std::max<int64_t>(n * static_cast<int64_t>(DTypeSize(dtype)), 1));
  const int64_t last = blocks_.empty() ? 0 : static_cast<int64_t>(blocks_.back().nbytes());
  if (blocks_.empty() || used_ + bytes > last) {
    const int64_t size = AlignUp(std::max({bytes, kMinBlock, 2 * last}));
    absl::StatusOr<Tensor> block = Tensor::Empty(DType::kF32, {size / 4}, device_);
    if (!block.ok()) return block.status();
    blocks_.push_back(*std::move(block));
    used_ = 0;
  }
  void* p = static_cast<char*>(blocks_.back().data<void>()) + used_;
  used_ += bytes;
  live_bytes_ += bytes;  // after the block: a failed allocation leaves the counts as they were
  peak_bytes_ = std::max(peak_bytes_, live_bytes_);
  return TensorView(p, dtype, std::move(shape), device_);
}

absl::Status Arena::OneBlock(int64_t bytes) {
  blocks_.clear();
  used_ = 0;
  absl::StatusOr<Tensor> block =
      Tensor::Empty(DType::kF32, {AlignUp(std::max(bytes, kMinBlock)) / 4}, device_);
  if (!block.ok()) return block.status();
  blocks_.push_back(*std::move(block));
  return absl::OkStatus();
}

void Arena::Reset() {
  // Coalesce: next time one block holds the whole step (a failure leaves none: the next
  // allocation makes one).
  if (blocks_.size() > 1) (void)OneBlock(peak_bytes_);
  used_ = 0;
  live_bytes_ = 0;
  peak_bytes_ = 0;
}

absl::Status Arena::Reserve(int64_t bytes) {
  if (live_bytes_ != 0) {
    return absl::FailedPreconditionError("Arena::Reserve with scratch still allocated");
  }
  if (blocks_.size() == 1 && static_cast<int64_t>(blocks_[0].nbytes()) >= bytes) {
    return absl::OkStatus();
  }
  return OneBlock(bytes);
}

void Arena::Rewind(const Mark& m) {
  if (blocks_.size() != m.blocks) return;  // a block was added since: its memory stays used
  used_ = m.used;
  live_bytes_ = m.live;
}

ScratchScope::ScratchScope(const ExecContext& ctx) : arena_(ctx.arena) {
  if (arena_ != nullptr) mark_ = arena_->mark();
}
ScratchScope::~ScratchScope() {
  if (arena_ != nullptr) arena_->Rewind(mark_);
}

int64_t Arena::capacity_bytes() const {
  int64_t n = 0;
  for (const Tensor& b : blocks_) n += static_cast<int64_t>(b.nbytes());
  return n;
}

absl::StatusOr<TensorView> Scratch(const ExecContext& ctx, DType dtype, Shape shape) {
  if (ctx.arena == nullptr) {
    return absl::InternalError(
        absl::StrCat("an op needs scratch ", ShapeString(shape), " but the context has no arena"));
  }
  return ctx.arena->Allocate(dtype, std::move(shape));
}

}  // namespace linfer
