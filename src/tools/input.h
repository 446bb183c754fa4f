// What the `rinfer` subcommands read from users, under one set of rules:
//   * text (prompts, messages, text files) must be valid UTF-8; the error names the source and
//     the byte offset, unless the command's --allow-invalid-utf8 takes the raw bytes;
//   * "-" reads stdin; anything else must be a regular file (never blocks on a FIFO);
//   * a thread count far above the machine's is allowed but warned about.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "rinfer/status.h"

namespace rinfer {

// The whole text of `path` ("-": stdin). `what` names it in errors ("--prompt-file").
Result<std::string> read_text_input(const std::string& path, std::string_view what);

// ok, or "<what> is not valid UTF-8 (byte N): ..." naming --allow-invalid-utf8; ok whatever
// the bytes when `allow_invalid` is set.
Status check_utf8(std::string_view text, std::string_view what, bool allow_invalid);

// The lines of a text file ("-": stdin), one input each ("\r\n" endings taken too; a last line
// without "\n" counts). Errors name the file and the line: invalid UTF-8 (with the byte in the
// line), an empty or blank line, no lines at all.
Result<std::vector<std::string>> read_text_lines(const std::string& path, std::string_view what);

// Warns on stderr when `threads` (0: all cores) is more than the machine's hardware threads;
// `source` names where it was set (the flag or the recipe file).
void warn_if_oversubscribed(int threads, std::string_view source);

}  // namespace rinfer
