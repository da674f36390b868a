// Taking a stop string back out of a session's state.
//
// A session turn's reply is fed into the state token by token as it is generated; a stop string
// is only known once it completes, by then its first tokens (and the tokens it cuts) are in the
// state, while the client got the text before it. The next turn must continue what the client
// saw. The visible reply's tokens are the generated tokens whose text lies wholly within the
// visible text, then the encoding of the rest of it (the part of the token the stop string cuts),
// when those ids decode to exactly that rest after the others; else (an encoder that adds a
// leading space, say) the fewest generated tokens whose text covers the visible text.
//
// Example (byte-level BPE), stop "\n\nUser": generated [" Paris", ".\n", "\nUser"], visible
// " Paris.": " Paris" fits wholly, the rest "." encodes to ["."]. The state had " Paris" and ".\n"
// fed; it goes back to the copy made when ".\n" came (text held back from its "\n" on: " Paris"
// fed), and "." is left pending — the state as if the client had sent " Paris." back.
// With include_stop_str_in_output the visible text runs through the stop string: what follows it
// in its last token is taken out the same way (nothing is held back, so no copy is needed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "engine/request.h"

namespace linfer {

// What a session turn with stop strings records while it generates.
struct ReplyTrace {
  std::string text;           // the detokenizer's output so far
  std::vector<size_t> ends;   // per generated token: text.size() once it was pushed
  std::vector<bool> settled;  // per generated token: the detokenizer held nothing back after it
  size_t shown = 0;           // bytes of `text` the client got (what the stop checker let out)
  // Generated tokens whose text is all out to the client (the detokenizer and the stop checker
  // holding nothing back after them): a stop string can only begin after them.
  size_t clean = 0;
};

// Whether `ids`, decoded after the first `kept` generated tokens, give exactly `text`.
using ContinuationCheck =
    std::function<bool(size_t kept, absl::Span<const int32_t> ids, absl::string_view text)>;

// The token ids of the reply's first `trace.shown` bytes (see above). `generated` and the
// trace's per-token vectors have one entry per generated token.
std::vector<int32_t> VisibleReplyTokens(absl::Span<const int32_t> generated,
                                        const ReplyTrace& trace, const TextEncoder& encode,
                                        const ContinuationCheck& check);

}  // namespace linfer
