// The CPU twin's per-head recurrence: the chunked form equals the token-by-token form (to f32
// rounding) for every family's decay/delta combination, ragged lengths and several chunk sizes;
// splitting a sequence in two equals running it at once; one step equals the formula in f64.
#include "kernels/cpu/head_recurrence.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

namespace linfer::cpu {
namespace {

struct Case {
  std::string name;
  DecayKind decay;
  bool delta;
  bool normalize;
};

struct Inputs {
  int dk, dv;
  int64_t t;
  std::vector<float> q, k, v, g, beta, state, z;
};

Inputs MakeInputs(const Case& c, int dk, int dv, int64_t t, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  Inputs in{dk, dv, t, {}, {}, {}, {}, {}, {}, {}};
  in.q.resize(t * dk);
  in.k.resize(t * dk);
  in.v.resize(t * dv);
  for (auto& x : in.q) x = n(rng);
  for (auto& x : in.v) x = n(rng);
  for (auto& x : in.k) x = c.normalize ? u(rng) : n(rng);  // positive keys for the normaliser
  if (c.normalize) {
    for (auto& x : in.q) x = std::abs(x);
  }
  if (c.delta) {  // the delta rule is stable for unit keys
    for (int64_t i = 0; i < t; ++i) {
      float s = 0;
      for (int j = 0; j < dk; ++j) s += in.k[i * dk + j] * in.k[i * dk + j];
      for (int j = 0; j < dk; ++j) in.k[i * dk + j] /= std::sqrt(s);
    }
  }
  in.g.resize(c.decay == DecayKind::kVector ? t * dk : t);
  for (auto& x : in.g) x = -0.5f * u(rng) * u(rng);  // includes strong and weak decay
  in.beta.resize(t);
  for (auto& x : in.beta) x = u(rng);
  in.state.resize(dk * dv);
  for (auto& x : in.state) x = 0.1f * n(rng);
  in.z.resize(dk);
  for (auto& x : in.z) x = u(rng);
  return in;
}

HeadSequence View(const Case& c, Inputs& in, std::vector<float>& o, std::vector<float>& state,
                  std::vector<float>& z, int64_t offset) {
  HeadSequence s;
  s.q = in.q.data() + offset * in.dk;
  s.q_stride = in.dk;
  s.k = in.k.data() + offset * in.dk;
  s.k_stride = in.dk;
  s.v = in.v.data() + offset * in.dv;
  s.v_stride = in.dv;
  if (c.decay != DecayKind::kNone) {
    const int64_t w = c.decay == DecayKind::kVector ? in.dk : 1;
    s.g = in.g.data() + offset * w;
    s.g_stride = w;
  }
  s.beta = in.beta.data() + offset;
  s.beta_stride = 1;
  s.o = o.data() + offset * in.dv;
  s.o_stride = in.dv;
  s.state = state.data();
  s.z = c.normalize ? z.data() : nullptr;
  return s;
}

// max |a − b| / max(1, max |b|)
double RelErr(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0, scale = 1;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(double(a[i]) - b[i]));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return worst / scale;
}

class RecurrenceTest : public ::testing::TestWithParam<Case> {};

TEST_P(RecurrenceTest, ChunkedEqualsRecurrent) {
  const Case& c = GetParam();
  for (int64_t t : {1, 63, 64, 65, 200}) {
    for (int chunk : {16, 64, 32, 7}) {
      Inputs in = MakeInputs(c, 24, 20, t, static_cast<uint32_t>(t * 100 + chunk));
      RecurrenceSpec spec{in.dk, in.dv, c.decay, c.delta, c.normalize, 0.3f};
      ASSERT_TRUE(ValidateRecurrenceSpec(spec).ok());
      std::vector<float> o1(t * in.dv, NAN), o2(t * in.dv, NAN);
      std::vector<float> s1 = in.state, s2 = in.state, z1 = in.z, z2 = in.z;
      RecurrentForward(spec, View(c, in, o1, s1, z1, 0), t);
      ChunkedForward(spec, View(c, in, o2, s2, z2, 0), t, chunk);
      EXPECT_LT(RelErr(o2, o1), 2e-5) << c.name << " T=" << t << " chunk=" << chunk;
      EXPECT_LT(RelErr(s2, s1), 2e-5) << c.name << " T=" << t << " chunk=" << chunk;
      if (c.normalize) {
        EXPECT_LT(RelErr(z2, z1), 1e-5);
      }
    }
  }
}

TEST_P(RecurrenceTest, SplitEqualsWhole) {
  const Case& c = GetParam();
  const int64_t t = 130;
  Inputs in = MakeInputs(c, 16, 12, t, 7);
  RecurrenceSpec spec{in.dk, in.dv, c.decay, c.delta, c.normalize, 0.25f};
  std::vector<float> whole(t * in.dv), split(t * in.dv);
  std::vector<float> s1 = in.state, s2 = in.state, z1 = in.z, z2 = in.z;
  RecurrentForward(spec, View(c, in, whole, s1, z1, 0), t);
  // prefill(N) chunked, then single recurrent steps, must equal the whole recurrent run.
  const int64_t n = 97;
  ChunkedForward(spec, View(c, in, split, s2, z2, 0), n, 64);
  for (int64_t i = n; i < t; ++i) RecurrentForward(spec, View(c, in, split, s2, z2, i), 1);
  EXPECT_LT(RelErr(split, whole), 2e-5);
  EXPECT_LT(RelErr(s2, s1), 2e-5);
}

// The step against a direct float64 evaluation of the formula for one token.
TEST_P(RecurrenceTest, StepMatchesFormula) {
  const Case& c = GetParam();
  Inputs in = MakeInputs(c, 8, 6, 1, 3);
  RecurrenceSpec spec{in.dk, in.dv, c.decay, c.delta, c.normalize, 0.5f};
  std::vector<float> o(in.dv), s = in.state, z = in.z;
  RecurrentForward(spec, View(c, in, o, s, z, 0), 1);
  std::vector<double> ref(in.dk * in.dv), u(in.dv);
  for (int i = 0; i < in.dk; ++i) {
    const double a = c.decay == DecayKind::kNone     ? 1.0
                     : c.decay == DecayKind::kScalar ? std::exp(double(in.g[0]))
                                                     : std::exp(double(in.g[i]));
    for (int j = 0; j < in.dv; ++j) ref[i * in.dv + j] = a * in.state[i * in.dv + j];
  }
  for (int j = 0; j < in.dv; ++j) {
    double kts = 0;
    for (int i = 0; i < in.dk; ++i) kts += in.k[i] * ref[i * in.dv + j];
    u[j] = c.delta ? in.beta[0] * (in.v[j] - kts) : in.v[j];
  }
  double denom = 0;
  for (int i = 0; i < in.dk; ++i) denom += 0.5 * in.q[i] * (in.z[i] + in.k[i]);
  for (int j = 0; j < in.dv; ++j) {
    double oj = 0;
    for (int i = 0; i < in.dk; ++i) {
      ref[i * in.dv + j] += in.k[i] * u[j];
      oj += 0.5 * in.q[i] * ref[i * in.dv + j];
    }
    if (c.normalize) oj /= denom + 1e-10;
    EXPECT_NEAR(o[j], oj, 1e-5 * (1 + std::abs(oj))) << c.name << " j=" << j;
  }
  for (int x = 0; x < in.dk * in.dv; ++x) EXPECT_NEAR(s[x], ref[x], 1e-5 * (1 + std::abs(ref[x])));
}

INSTANTIATE_TEST_SUITE_P(Families, RecurrenceTest,
                         ::testing::Values(Case{"linear", DecayKind::kNone, false, false},
                                           Case{"linear_normalized", DecayKind::kNone, false, true},
                                           Case{"retnet_scalar", DecayKind::kScalar, false, false},
                                           Case{"gla_vector", DecayKind::kVector, false, false},
                                           Case{"delta", DecayKind::kNone, true, false},
                                           Case{"gated_delta", DecayKind::kScalar, true, false}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.name;
                         });

TEST(RecurrenceSpecTest, RefusesUndefinedCombinations) {
  EXPECT_FALSE(ValidateRecurrenceSpec({0, 4, DecayKind::kNone, false, false, 1}).ok());
  EXPECT_FALSE(ValidateRecurrenceSpec({4, 4, DecayKind::kVector, true, false, 1}).ok());
  EXPECT_FALSE(ValidateRecurrenceSpec({4, 4, DecayKind::kScalar, false, true, 1}).ok());
}

}  // namespace
}  // namespace linfer::cpu
