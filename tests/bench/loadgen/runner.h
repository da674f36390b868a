// Sends a list of requests at precomputed arrival times with an optional concurrency cap and a
// time cap, and collects what the client measured (vLLM bench serve's benchmark() loop).
#pragma once

#include <string>
#include <vector>

#include "tests/bench/loadgen/client.h"

namespace linfer::bench {

struct DispatchOptions {
  std::vector<double> arrival_s;  // send offsets, one per request (ArrivalTimes)
  int max_concurrency = 0;        // requests in flight at once; 0: no cap
  double duration_s = 600;        // nothing is sent after this and in-flight calls are cancelled
  bool progress = true;
  std::string label = "bench";
};

struct DispatchOutput {
  std::vector<RequestResult> results;  // the requests sent, in request order
  int not_sent = 0;                    // left unsent when duration_s ran out
  double duration_s = 0;               // first send until the last call finished
};

// Blocks until every request sent has finished.
DispatchOutput Dispatch(StreamClient& client, const std::vector<v1::GenerateRequest>& requests,
                        const DispatchOptions& options);

}  // namespace linfer::bench
