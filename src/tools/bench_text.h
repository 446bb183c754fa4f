// The text that rinfer bench and rinfer eval run on: the file --text or the recipe's
// bench.prompts names, else GPL-3, else (only when that default is missing) a built-in
// paragraph. A named file that cannot be read, is empty or is not UTF-8 is an error: the numbers
// and the precision gate must be measured on the text asked for. Never blocks on a FIFO
// (read_regular_file).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "recipe/recipe.h"
#include "rinfer/status.h"
#include "tokenizer/tokenizer.h"

namespace rinfer {

struct BenchText {
  std::string file;
  std::string named;  // "--text", "<recipe>: bench.prompts"; empty for the default
};

// `text_flag`: the command's --text ("" when not given); `recipe`: whose bench.prompts applies.
BenchText bench_text(const std::string& text_flag, const RecipeConfig& recipe);

// The text ("" when the default file is missing).
Result<std::string> read_bench_text(const BenchText& t);

// n tokens of the text (repeated when short), BOS first when the model wants one; *source names
// where they came from.
Result<std::vector<int32_t>> text_tokens(const Tokenizer& tok, const BenchText& file, int64_t n,
                                         std::string* source);

}  // namespace rinfer
