// Small hand-made tokenizer.json documents for unit tests (no files or network needed).
#pragma once

#include <string>

#include "models/tokenizer/byte_level.h"
#include "models/tokenizer/json_util.h"
#include "models/tokenizer/utf8.h"

namespace linfer::tokenizer::testing {

// Byte-level BPE (GPT-2 style): the 256 byte characters, merges for "hello"/" world", and the
// special token <|end|>.
inline Json ByteLevelTokenizerJson() {
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    AppendUtf8(ByteToChar(static_cast<unsigned char>(b)), &ch);
    vocab[ch] = b;
  }
  const char* merged[] = {"he", "ll",          "llo", "hello",        "\xC4\xA0w",
                          "or", "\xC4\xA0wor", "ld",  "\xC4\xA0world"};
  const char* merges[] = {"h e", "l l",          "ll o", "he llo",        "\xC4\xA0 w",
                          "o r", "\xC4\xA0w or", "l d",  "\xC4\xA0wor ld"};
  for (int i = 0; i < 9; ++i) vocab[merged[i]] = 256 + i;
  Json j;
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", Json(merges)}};
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  j["decoder"] = {{"type", "ByteLevel"}};
  j["added_tokens"] = Json::array(
      {{{"id", 300}, {"content", "<|end|>"}, {"special", true}, {"normalized", false}}});
  return j;
}

// SentencePiece-style BPE with byte fallback (Llama 2 style): Prepend + Replace normalizer,
// <0xNN> tokens, and a decoder chain Replace/ByteFallback/Fuse/Strip; BOS template.
inline Json ByteFallbackTokenizerJson() {
  Json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = 3 + b;
  }
  const char* pieces[] = {"\xE2\x96\x81",
                          "a",
                          "b",
                          "c",
                          "\xE2\x96\x81"
                          "a",
                          "ab",
                          "\xE2\x96\x81"
                          "ab",
                          "\xE2\x96\x81"
                          "abc"};
  for (int i = 0; i < 8; ++i) vocab[pieces[i]] = 259 + i;
  Json j;
  j["model"] = {{"type", "BPE"},
                {"vocab", vocab},
                {"unk_token", "<unk>"},
                {"byte_fallback", true},
                {"fuse_unk", true},
                {"merges", Json::array({Json::array({"\xE2\x96\x81", "a"}),
                                        Json::array({"\xE2\x96\x81"
                                                     "a",
                                                     "b"}),
                                        Json::array({"a", "b"}),
                                        Json::array({"\xE2\x96\x81"
                                                     "ab",
                                                     "c"})})}};
  j["normalizer"] = {
      {"type", "Sequence"},
      {"normalizers",
       {{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
        {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}}}}};
  j["decoder"] = {
      {"type", "Sequence"},
      {"decoders",
       {{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
        {{"type", "ByteFallback"}},
        {{"type", "Fuse"}},
        {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single",
       {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
        {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
      {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}};
  j["added_tokens"] =
      Json::array({{{"id", 0}, {"content", "<unk>"}, {"special", true}, {"normalized", false}},
                   {{"id", 1}, {"content", "<s>"}, {"special", true}, {"normalized", false}},
                   {{"id", 2}, {"content", "</s>"}, {"special", true}, {"normalized", false}}});
  return j;
}

}  // namespace linfer::tokenizer::testing
