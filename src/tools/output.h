// What the `rinfer` subcommands write, made safe for any bytes and checked:
//   * JSON text from values that may hold any bytes (file names, model metadata): invalid
//     UTF-8 becomes U+FFFD instead of an exception;
//   * terminal text from such values: core/strings.h display_text();
//   * standard output: streamed pieces and the final flush are checked, so a command whose
//     output was lost (`> /dev/full`, a closed stdout, a closed pipe) exits non-zero.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace rinfer {

// j.dump(indent) with invalid UTF-8 replaced by U+FFFD (never throws for bad strings).
std::string json_text(const nlohmann::ordered_json& j, int indent = 2);
std::string json_text(const nlohmann::json& j, int indent = 2);

// "1 image", "2 images": a count and its noun (`plural_noun` for irregular ones, e.g. "passes").
std::string count_of(long long n, std::string_view noun, std::string_view plural_noun = "");

// Writes to stdout and flushes; false (and the error remembered) when the write failed.
bool write_stdout(std::string_view s);

// At the end of a command: flushes stdout; when it (or an earlier write) failed, prints
// "rinfer: error: writing the output to stdout failed: <reason>" and returns `exit_code`, or 1
// when that was 0.
int check_stdout_written(int exit_code);

}  // namespace rinfer
