// Finding and loading the model directory (and its tokenizer) for the commands.
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "absl/flags/flag.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cli/commands.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "engine/detokenizer.h"
#include "engine/stop.h"
#include "kernels/device_memory.h"

ABSL_FLAG(std::string, device, "auto",
          "Where the model and every state run: cuda, cpu, or auto (cuda when this build has CUDA "
          "and the machine a GPU, else cpu)");
ABSL_FLAG(std::string, weight_dtype, "auto",
          "Matmul weights and the embedding table: f32, bf16, f16 (cpu only), or auto (bf16 on "
          "cuda, f32 on cpu); arithmetic stays f32; norms, gates and other small tensors stay f32");
ABSL_FLAG(std::string, fp8_weights, "auto",
          "fp8 checkpoints' fp8 matmul weights: keep (as stored with their scales, a quarter of "
          "f32's memory; the products dequantize them as they read them, to the values "
          "dequantizing on load gives; on cuda compiled but not yet run on a GPU), dequantize (on "
          "load, to --weight_dtype), or auto (keep on cpu, dequantize on cuda)");
ABSL_FLAG(std::string, quantization, "",
          "fp8: quantize the matmul weights of a checkpoint without fp8 weights to fp8 on load, "
          "in the form of Qwen's -FP8 checkpoints (128x128 blocks, one f32 scale each; not the "
          "embeddings, the LM head or Qwen's small gate projections): half of bf16's memory, a "
          "quarter of f32's (held as --fp8_weights keep holds them)");
ABSL_FLAG(std::string, state_dtype, "f32",
          "Recurrent state storage: f32, or bf16 (cuda; halves each slot, f32 arithmetic)");
ABSL_FLAG(std::string, kv_dtype, "f32",
          "Attention layers' KV cache storage (hybrid models): f32, bf16 (halves each token's "
          "keys and values: twice the tokens in --kv_memory_mb), or fp8 / fp8_e4m3 (a quarter: "
          "e4m3 with scale 1, saturating at +-448, as vLLM's --kv-cache-dtype fp8 without "
          "calibrated scales); f32 arithmetic");

namespace linfer::cli {
namespace {

namespace fs = std::filesystem;

fs::path ExecutableDir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : exe.parent_path();
}

}  // namespace

absl::StatusOr<std::string> ModelDir() {
  const std::string flag = absl::GetFlag(FLAGS_model);
  if (!flag.empty()) return flag;
  std::vector<fs::path> candidates = {
      fs::current_path() / "models/tiny", ExecutableDir() / "../../models/tiny",
      ExecutableDir() / "../share/linfer/models/tiny", "/usr/share/linfer/models/tiny"};
  std::vector<std::string> tried;
  for (const fs::path& p : candidates) {
    std::error_code ec;
    if (fs::exists(p / "config.json", ec)) return fs::weakly_canonical(p, ec).string();
    tried.push_back(p.string());
  }
  return absl::NotFoundError(absl::StrCat("no --model given and no bundled model found (tried ",
                                          absl::StrJoin(tried, ", "), ")"));
}

absl::StatusOr<std::vector<int32_t>> ParseTokenIds(absl::string_view text, absl::string_view what,
                                                   bool allow_empty) {
  std::vector<int32_t> ids;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    int32_t id;
    if (!absl::SimpleAtoi(part, &id)) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": '", part, "' is not an integer"));
    }
    ids.push_back(id);
  }
  if (ids.empty() && !allow_empty) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": give at least one token id"));
  }
  return ids;
}

absl::StatusOr<LoadOptions> LoadOptionsFromFlags() {
  const bool cuda_build = absl::string_view(LINFER_WITH_CUDA_STRING) == "on";
  LoadOptions o;
  const std::string device = absl::GetFlag(FLAGS_device);
  if (device == "auto") {
    o.device = CudaAvailable() ? Device::kCuda : Device::kCpu;
    Log(LogLevel::kInfo,
        o.device == Device::kCuda
            ? std::string("device: cuda (--device auto found a GPU)")
            : absl::StrCat("device: cpu (--device auto: ",
                           cuda_build ? "no usable GPU" : "this build has no CUDA", ")"));
  } else if (device == "cuda") {
    if (!CudaAvailable()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--device cuda: ",
          cuda_build ? "no usable CUDA device on this machine (driver or GPU missing)"
                     : "this build has no CUDA backend (configure with -DLINFER_CUDA=ON)"));
    }
    o.device = Device::kCuda;
  } else if (device == "cpu") {
    o.device = Device::kCpu;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--device must be auto, cuda or cpu, got '", device, "'"));
  }
  const std::string weights = absl::GetFlag(FLAGS_weight_dtype);
  if (weights == "auto") {
    o.matrix_dtype = o.device == Device::kCuda ? DType::kBF16 : DType::kF32;
  } else if (weights == "f32") {
    o.matrix_dtype = DType::kF32;
  } else if (weights == "bf16") {
    o.matrix_dtype = DType::kBF16;
  } else if (weights == "f16") {
    if (o.device == Device::kCuda) {
      return absl::InvalidArgumentError(
          "--weight_dtype f16 runs on the cpu only; on cuda use bf16 (or f32)");
    }
    o.matrix_dtype = DType::kF16;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--weight_dtype must be auto, f32, bf16 or f16, got '", absl::CEscape(weights), "'"));
  }
  const std::string fp8 = absl::GetFlag(FLAGS_fp8_weights);
  if (fp8 == "auto") {
    o.fp8_weights = LoadOptions::Fp8Weights::kAuto;
  } else if (fp8 == "keep") {
    o.fp8_weights = LoadOptions::Fp8Weights::kKeep;
  } else if (fp8 == "dequantize") {
    o.fp8_weights = LoadOptions::Fp8Weights::kDequantize;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--fp8_weights must be auto, keep or dequantize, got '", absl::CEscape(fp8), "'"));
  }
  const std::string quantization = absl::GetFlag(FLAGS_quantization);
  if (quantization == "fp8") {
    o.quantize_fp8 = true;
  } else if (!quantization.empty() && quantization != "none") {
    return absl::InvalidArgumentError(absl::StrCat("--quantization must be fp8 or none, got '",
                                                   absl::CEscape(quantization), "'"));
  }
  const std::string state = absl::GetFlag(FLAGS_state_dtype);
  if (state == "f32" || state == "bf16") {
    o.state_dtype = state == "f32" ? DType::kF32 : DType::kBF16;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--state_dtype must be f32 or bf16, got '", state, "'"));
  }
  const std::string kv = absl::GetFlag(FLAGS_kv_dtype);
  if (kv == "f32" || kv == "bf16") {
    o.kv_dtype = kv == "f32" ? DType::kF32 : DType::kBF16;
  } else if (kv == "fp8" || kv == "fp8_e4m3") {
    o.kv_dtype = DType::kF8E4M3;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--kv_dtype must be f32, bf16, fp8 or fp8_e4m3, got '", absl::CEscape(kv), "'"));
  }
  return o;  // Model::Load refuses state dtypes the device or family cannot hold, naming them
}

namespace {

// The end-of-sequence ids of generation_config.json and the tokenizer's files: ids the model can
// never produce (at or past its vocabulary) are dropped with a warning naming the file, as they
// would make every request's stop ids invalid; more distinct ids than a request may carry is an
// error here, not in every request.
absl::Status CheckEndIds(const std::string& dir, LoadedModel& out) {
  const int64_t vocab = out.model->vocab_size();
  // Appends the ids of `from` the model can produce to `into`, once each; warns of the others.
  const auto merge = [&](const std::vector<int32_t>& from, const std::string& source,
                         std::vector<int32_t>& into) {
    for (int32_t id : from) {
      if (id < 0 || id >= vocab) {
        Log(LogLevel::kWarning,
            absl::StrCat(dir, source, id, " is outside the model's vocabulary of ", vocab,
                         ": ignored"));
      } else if (std::find(into.begin(), into.end(), id) == into.end()) {
        into.push_back(id);
      }
    }
  };
  std::vector<int32_t> kept;
  merge(out.defaults.eos_token_ids, "/generation_config.json: eos_token_id ", kept);
  out.defaults.eos_token_ids = kept;
  std::vector<int32_t>& all = kept;  // with the tokenizer's: what every request adds
  if (out.tokenizer != nullptr) {
    merge(out.tokenizer->special_tokens().eos_ids, ": the tokenizer's end-of-sequence token ", all);
  }
  if (all.size() > kMaxModelEndIds) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, ": generation_config.json and the tokenizer's files name ", all.size(),
                     " distinct end-of-sequence ids; at most ", kMaxModelEndIds, " are supported"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LoadedModel> LoadModelAndTokenizer(const std::string& dir) {
  ASSIGN_OR_RETURN(const LoadOptions options, LoadOptionsFromFlags());
  LoadedModel out;
  ASSIGN_OR_RETURN(out.model, Model::Load(dir, options));
  ASSIGN_OR_RETURN(out.defaults, LoadGenerationDefaults(dir));
  std::error_code ec;
  if (fs::exists(fs::path(dir) / "tokenizer.json", ec) ||
      fs::exists(fs::path(dir) / tokenizer::kRwkvWorldVocabFileName, ec)) {
    ASSIGN_OR_RETURN(out.tokenizer, tokenizer::Tokenizer::FromDirectory(dir));
    out.detokenizer = MakeDetokenizerFactory(out.tokenizer.get());
    out.encoder = MakeTextEncoder(out.tokenizer.get());
  }
  RETURN_IF_ERROR(CheckEndIds(dir, out));
  if (out.tokenizer != nullptr && out.tokenizer->id_end() > out.model->vocab_size()) {
    // transformers loads such a pair too; a prompt with those tokens is then refused (400).
    const int32_t last = static_cast<int32_t>(out.tokenizer->id_end() - 1);
    const std::string* token = out.tokenizer->IdToToken(last);
    Log(LogLevel::kWarning,
        absl::StrCat(dir, ": the tokenizer has ids up to ", last, " (",
                     token != nullptr ? absl::StrCat("'", *token, "'") : std::string("?"),
                     "), past the model's vocabulary of ", out.model->vocab_size(),
                     " (config.json vocab_size): prompts with those tokens are refused"));
  }
  return out;
}

}  // namespace linfer::cli
