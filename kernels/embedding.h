// Row gathers: token embeddings and each sequence's last row (before the LM head).
#pragma once

#include "absl/status/status.h"
#include "kernels/context.h"

namespace linfer {

// out[t] = table[tokens[t]]: table [V, D] f32 or bf16 (or f16 on the CPU), tokens I32 [T] on the
// device (ids must be in [0, V): validated when requests are accepted), out [T, D] f32.
absl::Status Embedding(const ExecContext& ctx, const TensorView& table, const TensorView& tokens,
                       const TensorView& out);

// out[b] = x[rows[b]]: x [T, D] f32, rows I32 [B] on the device, out [B, D] f32.
absl::Status GatherRows(const ExecContext& ctx, const TensorView& x, const TensorView& rows,
                        const TensorView& out);

}  // namespace linfer
