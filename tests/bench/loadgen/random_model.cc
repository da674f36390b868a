// Writes a random-weight Gated DeltaNet checkpoint (tests/testing/random_checkpoint.h) to serve
// when models/tiny is not there; the defaults are models/tiny's shape.
//   linfer_bench_random_model --out DIR [--hidden 256 --layers 4 ...]
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "tests/testing/random_checkpoint.h"

ABSL_FLAG(std::string, out, "", "Directory to write config.json and model.safetensors into");
ABSL_FLAG(int64_t, hidden, 256, "hidden_size");
ABSL_FLAG(int64_t, layers, 4, "num_hidden_layers");
ABSL_FLAG(int64_t, heads, 4, "num_heads");
ABSL_FLAG(int64_t, head_dim, 64, "head_dim");
ABSL_FLAG(int64_t, vocab, 4096, "vocab_size");
ABSL_FLAG(double, expand_v, 1.0, "expand_v (models/tiny: 1)");
ABSL_FLAG(int64_t, intermediate, 512, "intermediate_size of the SwiGLU MLP (models/tiny: 512)");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_out).empty()) {
    std::fprintf(stderr, "linfer_bench_random_model: --out DIR is required\n");
    return 1;
  }
  linfer::testing_util::GdnShape shape;
  shape.hidden = absl::GetFlag(FLAGS_hidden);
  shape.layers = absl::GetFlag(FLAGS_layers);
  shape.heads = absl::GetFlag(FLAGS_heads);
  shape.head_dim = absl::GetFlag(FLAGS_head_dim);
  shape.vocab = absl::GetFlag(FLAGS_vocab);
  shape.expand_v = absl::GetFlag(FLAGS_expand_v);
  shape.intermediate = absl::GetFlag(FLAGS_intermediate);
  const absl::Status st =
      linfer::testing_util::WriteRandomGdnCheckpoint(absl::GetFlag(FLAGS_out), shape);
  if (!st.ok()) {
    std::fprintf(stderr, "linfer_bench_random_model: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}
