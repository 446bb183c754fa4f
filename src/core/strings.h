// Text from untrusted files shown in messages: printable ASCII kept, every other byte escaped as
// \xNN, cut after max_chars. Keeps error messages one line and safe to print.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace rinfer {

std::string printable(std::string_view s, size_t max_chars = 240);

// printable() in single quotes, with quote and backslash escaped too: 'blk.0.attn_q.weight'.
std::string quoted(std::string_view s, size_t max_chars = 96);

// Text from files or users for a terminal, whole: valid UTF-8 kept (C1 controls excepted);
// \n, \t, \r and \\ escaped as such, other control bytes and invalid UTF-8 bytes as \xNN.
// Metadata printed this way cannot move the cursor or inject terminal escape sequences.
std::string display_text(std::string_view s);

// s without leading and trailing ASCII whitespace (" \t\n\r\f\v", what Python's str.strip()
// and Jinja's trim remove from ASCII text).
std::string_view trim_space(std::string_view s);

}  // namespace rinfer
