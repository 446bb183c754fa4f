#include "search/corpus.h"

#include <nlohmann/json.hpp>
#include <unordered_set>

#include "core/error.h"
#include "core/input_file.h"
#include "tokenizer/unicode.h"

namespace rinfer::search {

Result<std::vector<Document>> read_corpus(const std::string& path) {
  auto text = read_regular_file(path);
  if (!text.ok()) return text.status().with_context("corpus");
  const bool jsonl = path.ends_with(".jsonl");
  std::vector<Document> docs;
  std::unordered_set<std::string> ids;
  size_t pos = 0;
  for (int64_t line = 1; pos < text->size(); ++line) {
    size_t end = text->find('\n', pos);
    if (end == std::string::npos) end = text->size();
    std::string_view l(text->data() + pos, end - pos);
    pos = end + 1;
    if (l.ends_with('\r')) l.remove_suffix(1);
    size_t bad = 0;
    if (!unicode::is_valid_utf8(l, &bad)) {
      return invalid_argument("{}:{}: not valid UTF-8 (byte {} of the line)", path, line, bad);
    }
    if (l.find_first_not_of(" \t") == std::string_view::npos) {
      return invalid_argument("{}:{}: empty line (one document per line; remove it)", path, line);
    }
    Document d;
    if (!jsonl) {
      d.id = std::to_string(line);
      d.text = std::string(l);
    } else {
      const nlohmann::json j = nlohmann::json::parse(l, nullptr, false);
      if (j.is_discarded() || !j.is_object()) {
        return invalid_argument(
            "{}:{}: not a JSON object (a .jsonl corpus has one "
            "{{\"id\": ..., \"text\": ...}} per line)",
            path, line);
      }
      auto t = j.find("text");
      if (t == j.end() || !t->is_string() || t->get<std::string>().empty()) {
        return invalid_argument("{}:{}: \"text\" is missing, empty or not a string", path, line);
      }
      d.text = t->get<std::string>();
      auto id = j.find("id");
      if (id == j.end()) {
        d.id = std::to_string(line);
      } else if (id->is_string()) {
        d.id = id->get<std::string>();
      } else if (id->is_number_integer()) {
        d.id = std::to_string(id->get<int64_t>());
      } else {
        return invalid_argument("{}:{}: \"id\" must be a string or an integer", path, line);
      }
    }
    if (!ids.insert(d.id).second) {
      return invalid_argument("{}:{}: id '{}' appears twice", path, line, d.id);
    }
    docs.push_back(std::move(d));
  }
  if (docs.empty()) return invalid_argument("{}: the corpus holds no documents", path);
  return docs;
}

}  // namespace rinfer::search
