// A search corpus: the documents `rinfer index` embeds. One document per line of a text file,
// or JSON lines ({"id": ..., "text": ...}; the id a string or an integer, optional: the line
// number) for a file ending in .jsonl. Errors name the file and the line: invalid UTF-8, an
// empty line, a JSON line that is not an object with a string "text", a duplicate id.
#pragma once

#include <string>
#include <vector>

#include "rinfer/status.h"

namespace rinfer::search {

struct Document {
  std::string id;
  std::string text;
};

Result<std::vector<Document>> read_corpus(const std::string& path);

}  // namespace rinfer::search
