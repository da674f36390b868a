// Statistics of a run: vLLM's calculate_metrics(), in C++.
#include "tests/bench/loadgen/metrics.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <numeric>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace linfer::bench {
namespace {

double Mean(const std::vector<double>& v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / v.size();
}

double StdDev(const std::vector<double>& v) {  // population, as numpy.std
  if (v.empty()) return 0;
  const double m = Mean(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / v.size());
}

// mean_/median_/std_/pNN_<name>_ms from values in seconds.
void AddStats(const std::string& name, std::vector<double> seconds,
              const std::vector<double>& percentiles, nlohmann::json& out) {
  for (double& x : seconds) x *= 1000;
  out["mean_" + name + "_ms"] = Mean(seconds);
  out["median_" + name + "_ms"] = Percentile(seconds, 50);
  out["std_" + name + "_ms"] = StdDev(seconds);
  for (double p : percentiles) out[PercentileKey(p) + "_" + name + "_ms"] = Percentile(seconds, p);
}

double Tpot(const RequestResult& r) {
  return r.output_tokens > 1 ? (r.latency_s - r.ttft_s) / (r.output_tokens - 1) : 0;
}

bool IsGood(const RequestResult& r, const Slo& slo) {
  if (slo.ttft_ms >= 0 && r.ttft_s * 1000 > slo.ttft_ms) return false;
  if (slo.tpot_ms >= 0 && Tpot(r) * 1000 > slo.tpot_ms) return false;
  if (slo.e2el_ms >= 0 && r.latency_s * 1000 > slo.e2el_ms) return false;
  return true;
}

// vLLM's --save-detailed arrays, one entry per request sent.
void AddDetail(const std::vector<RequestResult>& results, nlohmann::json& j) {
  nlohmann::json& in_lens = j["input_lens"] = nlohmann::json::array();
  nlohmann::json& out_lens = j["output_lens"] = nlohmann::json::array();
  nlohmann::json& tt = j["ttfts"] = nlohmann::json::array();
  nlohmann::json& it = j["itls"] = nlohmann::json::array();
  nlohmann::json& lat = j["latencies"] = nlohmann::json::array();
  nlohmann::json& st = j["start_times"] = nlohmann::json::array();
  for (const RequestResult& r : results) {
    in_lens.push_back(r.prompt_tokens);
    out_lens.push_back(r.output_tokens);
    tt.push_back(r.ttft_s);
    it.push_back(r.itls_s);
    lat.push_back(r.latency_s);
    st.push_back(r.start_s);
  }
}

}  // namespace

absl::StatusOr<Slo> ParseGoodput(absl::string_view spec) {
  Slo slo;
  for (absl::string_view item : absl::StrSplit(spec, absl::ByAnyChar(", "), absl::SkipEmpty())) {
    std::vector<absl::string_view> kv = absl::StrSplit(item, ':');
    double v = 0;
    if (kv.size() != 2 || !absl::SimpleAtod(kv[1], &v) || !(v >= 0)) {
      return absl::InvalidArgumentError(absl::StrCat("--goodput: bad item '", item, "'"));
    }
    if (kv[0] == "ttft") {
      slo.ttft_ms = v;
    } else if (kv[0] == "tpot") {
      slo.tpot_ms = v;
    } else if (kv[0] == "e2el") {
      slo.e2el_ms = v;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--goodput: unknown metric '", kv[0], "' (ttft, tpot, e2el)"));
    }
  }
  return slo;
}

absl::StatusOr<std::vector<double>> ParsePercentiles(absl::string_view spec) {
  std::vector<double> out;
  for (absl::string_view item : absl::StrSplit(spec, ',', absl::SkipWhitespace())) {
    double p = 0;
    if (!absl::SimpleAtod(item, &p) || !(p > 0 && p <= 100)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--metric_percentiles: bad value '", item, "'"));
    }
    out.push_back(p);
  }
  return out;
}

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = p / 100 * (values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (rank - lo) * (values[hi] - values[lo]);
}

std::string PercentileKey(double p) {
  return p == std::floor(p) ? absl::StrCat("p", static_cast<int>(p)) : absl::StrCat("p", p);
}

int PeakConcurrency(const std::vector<RequestResult>& results) {
  std::vector<std::pair<double, int>> events;  // (time, +1 start / −1 end); ends sort first
  for (const RequestResult& r : results) {
    if (!r.success) continue;
    events.emplace_back(r.start_s, 1);
    events.emplace_back(r.start_s + r.latency_s, -1);
  }
  std::sort(events.begin(), events.end());
  int now = 0, peak = 0;
  for (const auto& [t, d] : events) peak = std::max(peak, now += d);
  return peak;
}

double MaxOutputTokensPerSecond(const std::vector<RequestResult>& results) {
  std::map<int64_t, int> bins;
  for (const RequestResult& r : results) {
    if (!r.success) continue;
    double t = r.start_s + r.ttft_s;
    ++bins[static_cast<int64_t>(std::floor(t))];
    for (double gap : r.itls_s) ++bins[static_cast<int64_t>(std::floor(t += gap))];
  }
  int best = 0;
  for (const auto& [bin, n] : bins) best = std::max(best, n);
  return best;
}

nlohmann::json Summarize(const std::vector<RequestResult>& results, double duration_s,
                         const MetricsOptions& options) {
  int completed = 0, good = 0, len_mismatch = 0, cut = 0;
  int64_t in = 0, out = 0, cached = 0;
  std::vector<double> ttfts, tpots, itls, e2els, server_ttfts;
  std::vector<std::string> errors;
  for (const RequestResult& r : results) {
    if (!r.success) {
      // In flight when the run's time cap (--duration_s) came: cancelled by the client, which
      // gives each call that deadline; not the server's failure.
      if (absl::StartsWith(r.error, "DEADLINE_EXCEEDED")) ++cut;
      errors.push_back(r.error);
      continue;
    }
    ++completed;
    in += r.prompt_tokens;
    out += r.output_tokens;
    cached += r.cached_tokens;
    if (r.output_tokens != r.requested_tokens || r.received_tokens != r.output_tokens ||
        r.usage_prompt_tokens != r.prompt_tokens) {
      ++len_mismatch;
    }
    ttfts.push_back(r.ttft_s);
    if (r.output_tokens > 1) tpots.push_back(Tpot(r));
    itls.insert(itls.end(), r.itls_s.begin(), r.itls_s.end());
    e2els.push_back(r.latency_s);
    server_ttfts.push_back(r.server_ttft_s);
    if (IsGood(r, options.slo)) ++good;
  }
  const double d = duration_s > 0 ? duration_s : 1e-9;
  nlohmann::json j;
  j["duration"] = duration_s;
  j["completed"] = completed;
  j["failed"] = static_cast<int>(results.size()) - completed - cut;
  j["cut_at_time_cap"] = cut;
  j["total_input_tokens"] = in;
  j["total_output_tokens"] = out;
  j["total_cached_tokens"] = cached;
  j["length_mismatches"] = len_mismatch;
  j["request_throughput"] = completed / d;
  j["request_goodput"] = options.slo.any() ? nlohmann::json(good / d) : nlohmann::json(nullptr);
  j["output_throughput"] = out / d;
  j["total_token_throughput"] = (in + out) / d;
  j["max_output_tokens_per_s"] = MaxOutputTokensPerSecond(results);
  j["max_concurrent_requests"] = PeakConcurrency(results);
  AddStats("ttft", ttfts, options.percentiles, j);
  AddStats("tpot", tpots, options.percentiles, j);
  AddStats("itl", itls, options.percentiles, j);
  AddStats("e2el", e2els, options.percentiles, j);
  j["mean_server_ttft_ms"] = Mean(server_ttfts) * 1000;
  j["errors"] = errors;
  if (options.detailed) AddDetail(results, j);
  return j;
}

absl::Status WriteCsv(const std::string& path, const std::vector<std::string>& columns,
                      const std::vector<nlohmann::json>& rows) {
  std::ofstream f(path);
  if (!f) return absl::PermissionDeniedError(absl::StrCat("cannot write ", path));
  f << absl::StrJoin(columns, ",") << "\n";
  for (const nlohmann::json& row : rows) {
    std::vector<std::string> cells;
    for (const std::string& c : columns) {
      const auto it = row.find(c);
      if (it == row.end() || it->is_null()) {
        cells.emplace_back();
      } else if (it->is_string()) {
        cells.push_back(it->get<std::string>());
      } else {
        cells.push_back(it->dump());
      }
    }
    f << absl::StrJoin(cells, ",") << "\n";
  }
  f.close();
  if (!f) return absl::DataLossError(absl::StrCat("error writing ", path));
  return absl::OkStatus();
}

}  // namespace linfer::bench
