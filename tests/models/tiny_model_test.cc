// The bundled model (models/tiny) loads through the same path as any checkpoint and its logits
// match the training script's PyTorch forward on the same input (tests/data/tiny_reference.json,
// written by models/train/export.py), in both recurrence forms.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "models/model.h"
#include "models/runner.h"
#include "nlohmann/json.hpp"

namespace linfer {
namespace {

TEST(TinyModelTest, LogitsMatchTheTrainingScript) {
  std::ifstream in(std::string(LINFER_SOURCE_DIR) + "/tests/data/tiny_reference.json");
  ASSERT_TRUE(in) << "tests/data/tiny_reference.json is missing";
  nlohmann::json ref = nlohmann::json::parse(in);
  const std::vector<int32_t> tokens = ref["tokens"].get<std::vector<int32_t>>();
  const auto& rows = ref["logits"];
  absl::StatusOr<std::unique_ptr<Model>> model =
      Model::Load(std::string(LINFER_SOURCE_DIR) + "/models/tiny");
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_EQ(rows.size(), tokens.size());
  for (RecurrenceMode mode : {RecurrenceMode::kRecurrent, RecurrenceMode::kChunked}) {
    SequenceRunner runner(model->get());
    absl::StatusOr<Tensor> logits = runner.Feed(tokens, {mode, 16, true});
    ASSERT_TRUE(logits.ok()) << logits.status();
    const int64_t v = logits->dim(1);
    double worst = 0, scale = 1;
    for (size_t t = 0; t < tokens.size(); ++t) {
      ASSERT_EQ(static_cast<int64_t>(rows[t].size()), v);
      for (int64_t j = 0; j < v; ++j) {
        const double want = rows[t][j].get<double>();
        worst = std::max(worst, std::abs(logits->data<float>()[t * v + j] - want));
        scale = std::max(scale, std::abs(want));
      }
    }
    EXPECT_LT(worst / scale, 1e-4) << "mode " << static_cast<int>(mode) << ": max abs error "
                                   << worst << " of max |logit| " << scale;
  }
}

}  // namespace
}  // namespace linfer
