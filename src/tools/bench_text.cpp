#include "tools/bench_text.h"

#include "core/error.h"
#include "core/input_file.h"
#include "tools/input.h"

namespace rinfer {

BenchText bench_text(const std::string& text_flag, const RecipeConfig& recipe) {
  if (!text_flag.empty()) return {text_flag, "--text"};
  if (recipe.bench.prompts) return {*recipe.bench.prompts, recipe.path + ": bench.prompts"};
  return {"/usr/share/common-licenses/GPL-3", ""};
}

Result<std::string> read_bench_text(const BenchText& t) {
  auto read = read_regular_file(t.file);
  if (!read.ok()) {
    if (t.named.empty() && read.status().code() == StatusCode::kNotFound) return std::string();
    return read.status().with_context(t.named.empty() ? "the benchmark text" : t.named);
  }
  const std::string what = t.named.empty() ? t.file : t.named + " " + t.file;
  if (read->empty()) return invalid_argument("{}: the file is empty", what);
  RINFER_RETURN_IF_ERROR(check_utf8(*read, what, /*allow_invalid=*/false));
  return read;
}

Result<std::vector<int32_t>> text_tokens(const Tokenizer& tok, const BenchText& file, int64_t n,
                                         std::string* source) {
  RINFER_ASSIGN_OR_RETURN(std::string text, read_bench_text(file));
  *source = file.file;
  if (text.empty()) {
    text =
        "The quick brown fox jumps over the lazy dog. A recipe says which model to run, on which "
        "device, with which optimization strategies, and how to sample; the benchmark measures "
        "each variant against the baseline on the same prompt. ";
    *source = "built-in text";
  }
  auto ids = tok.encode(text, EncodeOptions{.add_special = false, .parse_special = false});
  if (!ids.ok()) return ids.status().with_context("tokenizing " + *source);
  if (ids->empty()) return invalid_argument("{}: no tokens", *source);
  std::vector<int32_t> out;
  if (tok.add_bos() && tok.bos() >= 0) out.push_back(tok.bos());
  while (static_cast<int64_t>(out.size()) < n) {
    for (int32_t id : *ids) {
      if (static_cast<int64_t>(out.size()) >= n) break;
      out.push_back(id);
    }
  }
  return out;
}

}  // namespace rinfer
