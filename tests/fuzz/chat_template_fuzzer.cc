// Fuzz target: chat templates (a model directory's tokenizer_config.json is untrusted input).
// The input is a template source, NUL, then the JSON of the render variables (when valid). Every
// error must carry a message; nothing may crash, hang or allocate without bound (the options
// below are the limits under test).
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "models/tokenizer/chat_template.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using linfer::fuzz::Require;
  const absl::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  const std::string source(in.substr(0, nul));
  nlohmann::ordered_json vars = nlohmann::ordered_json::parse(
      nul == absl::string_view::npos ? absl::string_view("{}") : in.substr(nul + 1), nullptr,
      /*allow_exceptions=*/false);
  if (!vars.is_object()) {
    vars = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"add_generation_prompt", true}};
  }
  linfer::tokenizer::ChatTemplateOptions options;
  options.max_output_bytes = 1 << 20;
  options.max_loop_iterations = 1 << 16;
  options.max_work = int64_t{1} << 22;
  options.now = absl::FromUnixSeconds(1700000000);
  absl::StatusOr<linfer::tokenizer::ChatTemplate> t =
      linfer::tokenizer::ChatTemplate::Parse(source, options);
  if (!t.ok()) {
    Require(!t.status().message().empty(), "a parse error without a message");
    return 0;
  }
  absl::StatusOr<std::string> out = t->Render(vars);
  if (!out.ok()) {
    Require(!out.status().message().empty(), "a render error without a message");
    return 0;
  }
  Require(out->size() <= static_cast<size_t>(options.max_output_bytes), "output bound");
  return 0;
}
