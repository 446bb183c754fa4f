// Streaming detokenization: feed ids one at a time, get text that is always valid UTF-8.
//
// A token may end in the middle of a multi-byte character (byte-level BPE splits characters
// across tokens; SentencePiece byte fallback emits <0xE4><0xBD><0xA0> one byte per token). push()
// holds back an incomplete trailing sequence until the next token completes it, so the
// concatenation of push() results and finish() equals decode(ids) whenever that is valid UTF-8.
// Bytes that can never form a valid character are replaced by U+FFFD (one per ill-formed
// byte), and finish() does the same for a sequence left incomplete at the end, so nothing this
// class returns is ever broken UTF-8.
#pragma once

#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

namespace rinfer {

class StreamingDecoder {
 public:
  explicit StreamingDecoder(const Tokenizer& tokenizer, bool skip_special = false);

  // The text that became complete with this token (often empty or one token's text). An id out of
  // range produces no text (decode() reports it as an error; check ids before streaming them).
  std::string push(int32_t id);
  // Flushes what is held back (as U+FFFD) and resets for a new stream.
  std::string finish();

  // Bytes held back, waiting for the rest of a character (0 to 3).
  size_t pending() const { return pending_.size(); }

 private:
  // Moves the complete prefix of pending_ to `out`, replacing ill-formed bytes.
  void drain(std::string& out, bool final);

  const Tokenizer& tokenizer_;
  bool skip_special_;
  bool strip_space_;
  std::string pending_;
};

}  // namespace rinfer
