#include "tools/input.h"

#include <spdlog/spdlog.h>

#include <iostream>
#include <iterator>

#include "core/error.h"
#include "core/input_file.h"
#include "core/thread_pool.h"
#include "tokenizer/unicode.h"

namespace rinfer {

Result<std::string> read_text_input(const std::string& path, std::string_view what) {
  if (path == "-") {
    std::string text(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>{});
    if (std::cin.bad()) return io_error("{}: reading stdin failed", what);
    return text;
  }
  auto text = read_regular_file(path);
  if (!text.ok()) return text.status().with_context(std::string(what));
  return text;
}

Status check_utf8(std::string_view text, std::string_view what, bool allow_invalid) {
  size_t bad = 0;
  if (allow_invalid || unicode::is_valid_utf8(text, &bad)) return ok_status();
  return invalid_argument(
      "{} is not valid UTF-8 (byte {}): fix the text, or pass --allow-invalid-utf8 to take the "
      "raw bytes",
      what, bad);
}

Result<std::vector<std::string>> read_text_lines(const std::string& path, std::string_view what) {
  RINFER_ASSIGN_OR_RETURN(std::string text, read_text_input(path, what));
  const std::string name = path == "-" ? std::string("stdin") : path;
  std::vector<std::string> lines;
  size_t pos = 0;
  for (int64_t line = 1; pos < text.size(); ++line) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view l(text.data() + pos, end - pos);
    if (l.ends_with('\r')) l.remove_suffix(1);
    size_t bad = 0;
    if (!unicode::is_valid_utf8(l, &bad)) {
      return invalid_argument("{}:{}: not valid UTF-8 (byte {} of the line)", name, line, bad);
    }
    if (l.find_first_not_of(" \t") == std::string_view::npos) {
      return invalid_argument("{}:{}: empty line (each line is one input; remove it)", name, line);
    }
    lines.emplace_back(l);
    pos = end + 1;
  }
  if (lines.empty()) return invalid_argument("{}: {} holds no lines", what, name);
  return lines;
}

void warn_if_oversubscribed(int threads, std::string_view source) {
  const int hw = ThreadPool::hardware_threads();
  if (threads > hw) {
    spdlog::warn("{}: {} threads on a machine with {} hardware threads: expect it to be slower",
                 source, threads, hw);
  }
}

}  // namespace rinfer
