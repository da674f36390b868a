// The HTTP-vs-gRPC comparison of linfer_bench --backend compare: the same runs over the OpenAI
// HTTP API (SSE) and over gRPC, pooled over rounds, as one output-throughput ratio.
#pragma once

#include <vector>

#include "nlohmann/json.hpp"

namespace linfer::bench {

// `openai` and `grpc` hold one Summarize() result per round (same workload each). Returns the
// first gRPC run's metrics (so CSV columns stay filled) plus "openai"/"grpc" (the first runs),
// "openai_runs"/"grpc_runs" (all), "openai_output_throughput" and "grpc_output_throughput"
// (total output tokens / total duration over the rounds) and
// "openai_grpc_output_throughput_ratio" (their quotient; 0 when gRPC made nothing).
nlohmann::json CompareRuns(const std::vector<nlohmann::json>& openai,
                           const std::vector<nlohmann::json>& grpc);

}  // namespace linfer::bench
