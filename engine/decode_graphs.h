// CUDA graphs for decode-only engine steps (every segment one token). A step of n sequences is
// padded to the next batch bucket B (1, 2, 4, …, max_batch) with rows that feed token 0 to a
// reserved padding slot at position 0 (its state is scratch); its tokens, segment table and last
// rows (and, for hybrid models, the KV block tables, their width bucketed to a power of two) go
// from pinned host memory into device buffers in one copy, and the forward pass captured with
// those buffers is replayed: one launch instead of one per op (~10 per layer).
//
// Each (B, block width) graph owns its input buffers; the graphs of one batch size share a scratch
// arena (a graph's addresses are baked in, so it cannot be the engine's own arena, which resets
// and coalesces every step; a step's scratch does not depend on the block width, and graphs never
// run at once), and all share one logits buffer [max_batch, vocab]. Device memory: per batch
// bucket one step's activations (for a 0.8B model at B = 256 about 0.4 GB; all buckets together
// about twice the largest). A bucket's first step runs eagerly (the real step; it also sizes the
// arena), then the same forward is captured (recorded, not run) for the steps after it. A capture
// that fails leaves the step's eager result valid and reports itself through capture_error(); the
// engine then runs every step eagerly.
//
// On the CPU nothing is captured: a step is padded, staged and run eagerly (tests check the
// padding, the staging and the device-input path there, without a GPU).
//
// Valid while the model's weights, the states' tensors and the KV storage stay where they were
// (the engine's pool has a fixed budget: nothing moves); Run checks the KV storage's address.
// Engine thread only.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/device_context.h"
#include "kernels/segments.h"
#include "kernels/tensor.h"
#include "models/model.h"
#include "models/state.h"

namespace linfer {

class DecodeGraphs {
 public:
  // pad_slot: a slot of `states` the caller keeps allocated for padding rows (with one
  // KV block reserved for position 0 when the model has paged KV). max_batch ≥ 1.
  static absl::StatusOr<std::unique_ptr<DecodeGraphs>> Create(const Model* model,
                                                              DeviceContext* device,
                                                              const ModelStates* states,
                                                              int pad_slot, int max_batch);
  ~DecodeGraphs();
  DecodeGraphs(const DecodeGraphs&) = delete;
  DecodeGraphs& operator=(const DecodeGraphs&) = delete;

  // Whether Run takes this step: 1 to max_batch segments of one token each, none in the padding
  // slot.
  bool Accepts(absl::Span<const Segment> segments) const;
  // Finds (or makes: buffers, pinned staging) the graph for this step, touching no state: on an
  // error (ResourceExhausted: out of device or pinned memory) the caller runs the step eagerly.
  absl::Status Prepare(absl::Span<const Segment> segments);
  // Runs the prepared step (asynchronous on the device's stream): rows [0, n) of the result are
  // the segments' logits, f32 [n, vocab] on the device, valid until the next Run.
  absl::StatusOr<TensorView> Run(absl::Span<const int32_t> tokens,
                                 absl::Span<const Segment> segments, const ForwardOptions& options);

  // The first capture failure (OK while every capture worked).
  const absl::Status& capture_error() const { return capture_error_; }
  int64_t captures() const { return captures_; }
  int64_t replays() const { return replays_; }
  int max_batch() const { return max_batch_; }

 private:
  struct Graph {
    Graph() = default;
    Graph(const Graph&) = delete;
    Graph& operator=(const Graph&) = delete;
    ~Graph();  // frees the staging memory
    Device device = Device::kCpu;
    int batch = 0;
    int64_t max_blocks = 0;   // 0 without paged KV
    Tensor inputs;            // I32 words: table (8·B, as I64 [B, 4]), tokens (B), last rows (B),
                              // block tables (B·max_blocks)
    void* staging = nullptr;  // pinned host copy of `inputs`
    DeviceGraph graph;
  };
  DecodeGraphs(const Model* model, DeviceContext* device, const ModelStates* states, int pad_slot,
               int max_batch)
      : model_(model),
        device_(device),
        states_(states),
        pad_slot_(pad_slot),
        max_batch_(max_batch) {}
  absl::StatusOr<Graph*> Find(int batch, int64_t max_blocks);
  // The step's inputs for graph g, padded to its batch, written to its staging memory.
  void Stage(Graph& g, absl::Span<const int32_t> tokens, absl::Span<const Segment> segments);
  StepDeviceInputs DeviceInputs(const Graph& g) const;
  const void* KvStorage() const;

  const Model* model_;
  DeviceContext* device_;
  const ModelStates* states_;
  const int pad_slot_;
  const int max_batch_;
  Tensor logits_;                     // [max_batch, vocab]
  const void* kv_storage_ = nullptr;  // the KV storage the graphs were captured with
  int64_t kv_blocks_ = 0;             // and its blocks
  std::map<std::pair<int, int64_t>, std::unique_ptr<Graph>> graphs_;
  std::map<int, std::unique_ptr<Arena>> arenas_;  // by batch bucket
  std::vector<Segment> padded_;                   // the host table of the step being run
  Graph* prepared_ = nullptr;                     // by Prepare, for the next Run
  int prepared_n_ = 0;
  absl::Status capture_error_;
  int64_t captures_ = 0, replays_ = 0;
};

}  // namespace linfer
