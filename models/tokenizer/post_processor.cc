// Post-processor implementations (see post_processor.h). Only the single-sequence template is
// used: linfer never encodes sentence pairs.
#include "models/tokenizer/post_processor.h"

#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace linfer::tokenizer {
namespace {

// A template: pieces that are either fixed ids or the input sequence (empty `ids`).
class TemplateProcessor : public PostProcessor {
 public:
  struct Item {
    bool is_sequence;
    std::vector<int32_t> ids;
  };
  explicit TemplateProcessor(std::vector<Item> items) : items_(std::move(items)) {}
  void Process(std::vector<int32_t>* ids, bool add_special_tokens) const override {
    if (!add_special_tokens) return;
    std::vector<int32_t> out;
    out.reserve(ids->size() + 4);
    for (const Item& item : items_) {
      const std::vector<int32_t>& part = item.is_sequence ? *ids : item.ids;
      out.insert(out.end(), part.begin(), part.end());
    }
    *ids = std::move(out);
  }
  void CollectIds(std::vector<int32_t>* ids) const override {
    for (const Item& item : items_) ids->insert(ids->end(), item.ids.begin(), item.ids.end());
  }

 private:
  std::vector<Item> items_;
};

class NoOpProcessor : public PostProcessor {
 public:
  void Process(std::vector<int32_t>*, bool) const override {}
  void CollectIds(std::vector<int32_t>*) const override {}
};

class SequenceProcessor : public PostProcessor {
 public:
  explicit SequenceProcessor(std::vector<std::unique_ptr<PostProcessor>> steps)
      : steps_(std::move(steps)) {}
  void Process(std::vector<int32_t>* ids, bool add_special_tokens) const override {
    for (const auto& step : steps_) step->Process(ids, add_special_tokens);
  }
  void CollectIds(std::vector<int32_t>* ids) const override {
    for (const auto& step : steps_) step->CollectIds(ids);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> steps_;
};

absl::StatusOr<std::vector<int32_t>> SpecialIds(const Json& specials, const std::string& name) {
  const Json* entry = Find(specials, name.c_str());
  const Json* ids = entry == nullptr ? nullptr : Find(*entry, "ids");
  if (ids == nullptr || !ids->is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat("post_processor TemplateProcessing: special token \"", name, "\" unknown"));
  }
  std::vector<int32_t> out;
  for (const Json& id : *ids) {
    const std::optional<int32_t> value = AsTokenId(id);
    if (!value) {
      return absl::InvalidArgumentError(
          absl::StrCat("post_processor TemplateProcessing: special token \"", name.substr(0, 64),
                       "\" has \"ids\" entry ", id.dump().substr(0, 40),
                       ", which is not a token id (an integer in [0, 2^31))"));
    }
    out.push_back(*value);
  }
  return out;
}

absl::StatusOr<std::unique_ptr<PostProcessor>> ParseTemplate(const Json& j) {
  const Json* single = Find(j, "single");
  if (single == nullptr || !single->is_array()) {
    return absl::InvalidArgumentError("post_processor TemplateProcessing: no \"single\" template");
  }
  const Json* specials = Find(j, "special_tokens");
  std::vector<TemplateProcessor::Item> items;
  for (const Json& piece : *single) {
    if (const Json* seq = Find(piece, "Sequence"); seq != nullptr) {
      items.push_back({true, {}});
    } else if (const Json* sp = Find(piece, "SpecialToken"); sp != nullptr) {
      ASSIGN_OR_RETURN(const std::string name, GetString(*sp, "id", "TemplateProcessing"));
      ASSIGN_OR_RETURN(std::vector<int32_t> ids,
                       SpecialIds(specials == nullptr ? Json() : *specials, name));
      items.push_back({false, std::move(ids)});
    } else {
      return absl::InvalidArgumentError("post_processor TemplateProcessing: bad template piece");
    }
  }
  return std::make_unique<TemplateProcessor>(std::move(items));
}

// RobertaProcessing / BertProcessing: {"cls": [token, id], "sep": [token, id]} -> CLS A SEP.
absl::StatusOr<std::unique_ptr<PostProcessor>> ParseClsSep(const Json& j) {
  std::vector<int32_t> ids[2];
  const char* keys[2] = {"cls", "sep"};
  for (int k = 0; k < 2; ++k) {
    const Json* pair = Find(j, keys[k]);
    const std::optional<int32_t> id = pair != nullptr && pair->is_array() && pair->size() == 2
                                          ? AsTokenId((*pair)[1])
                                          : std::nullopt;
    if (!id) {
      return absl::InvalidArgumentError(absl::StrCat(
          "post_processor: \"", keys[k], "\" must be [token, id] with an id in [0, 2^31)"));
    }
    ids[k].push_back(*id);
  }
  std::vector<TemplateProcessor::Item> items = {{false, ids[0]}, {true, {}}, {false, ids[1]}};
  return std::make_unique<TemplateProcessor>(std::move(items));
}

}  // namespace

absl::StatusOr<std::unique_ptr<PostProcessor>> ParsePostProcessor(const Json& j) {
  ASSIGN_OR_RETURN(const std::string type, GetType(j, "post_processor"));
  if (type == "TemplateProcessing") return ParseTemplate(j);
  if (type == "ByteLevel") return std::make_unique<NoOpProcessor>();
  if (type == "RobertaProcessing" || type == "BertProcessing") return ParseClsSep(j);
  if (type == "Sequence") {
    const Json* list = Find(j, "processors");
    if (list == nullptr || !list->is_array()) {
      return absl::InvalidArgumentError("post_processor Sequence: missing \"processors\"");
    }
    std::vector<std::unique_ptr<PostProcessor>> steps;
    for (const Json& item : *list) {
      ASSIGN_OR_RETURN(std::unique_ptr<PostProcessor> step, ParsePostProcessor(item));
      steps.push_back(std::move(step));
    }
    return std::make_unique<SequenceProcessor>(std::move(steps));
  }
  return absl::UnimplementedError(absl::StrCat(
      "post_processor type \"", type,
      "\" is not supported (supported: TemplateProcessing, ByteLevel, RobertaProcessing, "
      "BertProcessing, Sequence)"));
}

}  // namespace linfer::tokenizer
