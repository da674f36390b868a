// Every fla family against the independent float64 Python reference (tests/models/reference),
// on the tiny random checkpoints it writes: logits within 1e-4 relative, in both recurrence
// forms; prefill(N) + one step = prefill(N+1); a ragged batch = its sequences run alone.
#include "models/model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "models/runner.h"
#include "nlohmann/json.hpp"

namespace linfer {
namespace {

namespace fs = std::filesystem;

struct Fixture {
  std::string name;
  fs::path dir;
  std::vector<int32_t> tokens;
  std::vector<double> logits;  // [T, V]
  int64_t vocab = 0;
};

std::vector<Fixture> LoadFixtures() {
  std::vector<Fixture> out;
  const fs::path root = LINFER_FLA_FIXTURES;
  std::ifstream list(root / "cases.txt");
  std::string name;
  while (std::getline(list, name)) {
    if (name.empty()) continue;
    Fixture f{name, root / name, {}, {}, 0};
    std::ifstream ej(f.dir / "expected.json");
    nlohmann::json j = nlohmann::json::parse(ej);
    f.tokens = j["tokens"].get<std::vector<int32_t>>();
    f.vocab = j["vocab_size"].get<int64_t>();
    std::ifstream lf(f.dir / j["logits_file"].get<std::string>(), std::ios::binary);
    f.logits.resize(f.tokens.size() * f.vocab);
    lf.read(reinterpret_cast<char*>(f.logits.data()), f.logits.size() * sizeof(double));
    EXPECT_TRUE(lf.good()) << name;
    out.push_back(std::move(f));
  }
  return out;
}

const std::vector<Fixture>& Fixtures() {
  static const std::vector<Fixture> fixtures = LoadFixtures();
  return fixtures;
}

// max |a − b| / max(1, max |b|) over rows [row0, row0 + rows) of the reference.
double RelErr(const float* a, const double* b, int64_t n) {
  double worst = 0, scale = 1;
  for (int64_t i = 0; i < n; ++i) {
    worst = std::max(worst, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return worst / scale;
}

Tensor RunAll(Model& m, const std::vector<int32_t>& tokens, RecurrenceMode mode, int chunk) {
  SequenceRunner runner(&m);
  absl::StatusOr<Tensor> logits = runner.Feed(tokens, {mode, chunk, true});
  EXPECT_TRUE(logits.ok()) << logits.status();
  return logits.ok() ? *std::move(logits) : Tensor();
}

TEST(ModelReferenceTest, FixturesExist) {
  ASSERT_GE(Fixtures().size(), 40u) << LINFER_FLA_FIXTURES;
}

TEST(ModelReferenceTest, LogitsMatchReferenceInBothForms) {
  for (const Fixture& f : Fixtures()) {
    absl::StatusOr<std::unique_ptr<Model>> m = Model::Load(f.dir);
    ASSERT_TRUE(m.ok()) << f.name << ": " << m.status();
    for (auto [mode, chunk] : {std::pair{RecurrenceMode::kRecurrent, 64},
                               {RecurrenceMode::kChunked, 64},
                               {RecurrenceMode::kChunked, 16}}) {
      Tensor logits = RunAll(**m, f.tokens, mode, chunk);
      ASSERT_EQ(logits.numel(), static_cast<int64_t>(f.logits.size())) << f.name;
      EXPECT_LT(RelErr(logits.data<float>(), f.logits.data(), logits.numel()), 1e-4)
          << f.name << " mode=" << static_cast<int>(mode) << " chunk=" << chunk;
    }
  }
}

TEST(ModelReferenceTest, PrefillThenStepsEqualsOnePass) {
  for (const Fixture& f : Fixtures()) {
    absl::StatusOr<std::unique_ptr<Model>> m = Model::Load(f.dir);
    ASSERT_TRUE(m.ok()) << f.name << ": " << m.status();
    const int64_t t = static_cast<int64_t>(f.tokens.size()), v = f.vocab, n = 65;
    SequenceRunner runner(m->get());
    std::vector<int32_t> head(f.tokens.begin(), f.tokens.begin() + n);
    absl::StatusOr<Tensor> first = runner.Feed(head, {RecurrenceMode::kChunked, 64, false});
    ASSERT_TRUE(first.ok()) << first.status();
    EXPECT_LT(RelErr(first->data<float>(), f.logits.data() + (n - 1) * v, v), 1e-4) << f.name;
    for (int64_t i = n; i < t; ++i) {
      absl::StatusOr<Tensor> l = runner.Feed({&f.tokens[i], 1}, {});
      ASSERT_TRUE(l.ok()) << l.status();
      EXPECT_LT(RelErr(l->data<float>(), f.logits.data() + i * v, v), 1e-4)
          << f.name << " step " << i;
    }
    EXPECT_EQ(runner.position(), t);
  }
}

TEST(ModelReferenceTest, RaggedBatchEqualsSeparateRuns) {
  for (const Fixture& f : Fixtures()) {
    absl::StatusOr<std::unique_ptr<Model>> m = Model::Load(f.dir);
    ASSERT_TRUE(m.ok()) << f.name << ": " << m.status();
    const int64_t v = f.vocab;
    // Three sequences: the whole fixture, a 1-token prefix, a 64-token prefix.
    std::vector<int32_t> a = f.tokens, b(f.tokens.begin(), f.tokens.begin() + 1),
                         c(f.tokens.begin(), f.tokens.begin() + 64);
    // Packed in one step over slots 5, 0 and 2 of a 6-slot state.
    absl::StatusOr<ModelStates> states =
        ModelStates::Allocate((*m)->state_specs(), 6, Device::kCpu);
    ASSERT_TRUE(states.ok()) << states.status();
    std::vector<int32_t> tokens = a;
    tokens.insert(tokens.end(), b.begin(), b.end());
    tokens.insert(tokens.end(), c.begin(), c.end());
    const int64_t na = static_cast<int64_t>(a.size());
    const std::vector<Segment> segs = {{0, na, 0, 5}, {na, 1, 0, 0}, {na + 1, 64, 0, 2}};
    Arena arena(Device::kCpu);
    absl::StatusOr<Tensor> l = Tensor::Empty(DType::kF32, {3, v});
    ASSERT_TRUE(l.ok());
    absl::Status st = (*m)->Forward(CpuContext(&arena), {tokens, segs}, *states, l->view());
    ASSERT_TRUE(st.ok()) << st;
    const int64_t last[3] = {static_cast<int64_t>(a.size()) - 1, 0, 63};
    for (int s = 0; s < 3; ++s) {
      EXPECT_LT(RelErr(l->data<float>() + s * v, f.logits.data() + last[s] * v, v), 1e-4)
          << f.name << " sequence " << s;
    }
  }
}

}  // namespace
}  // namespace linfer
