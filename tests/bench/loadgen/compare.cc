// CompareRuns: pooled throughputs of the two backends and their ratio.
#include "tests/bench/loadgen/compare.h"

namespace linfer::bench {
namespace {

// Total output tokens / total duration of `runs` (tokens/s).
double PooledThroughput(const std::vector<nlohmann::json>& runs) {
  double tokens = 0, seconds = 0;
  for (const nlohmann::json& r : runs) {
    tokens += r.value("total_output_tokens", 0.0);
    seconds += r.value("duration", 0.0);
  }
  return seconds > 0 ? tokens / seconds : 0.0;
}

}  // namespace

nlohmann::json CompareRuns(const std::vector<nlohmann::json>& openai,
                           const std::vector<nlohmann::json>& grpc) {
  nlohmann::json j = grpc.empty() ? nlohmann::json::object() : grpc[0];
  j["backend"] = "compare";
  j["openai"] = openai.empty() ? nlohmann::json(nullptr) : openai[0];
  j["grpc"] = grpc.empty() ? nlohmann::json(nullptr) : grpc[0];
  j["openai_runs"] = openai;
  j["grpc_runs"] = grpc;
  j["rounds"] = openai.size();
  const double h = PooledThroughput(openai);
  const double g = PooledThroughput(grpc);
  j["openai_output_throughput"] = h;
  j["grpc_output_throughput"] = g;
  j["openai_grpc_output_throughput_ratio"] = g > 0 ? h / g : 0.0;
  return j;
}

}  // namespace linfer::bench
