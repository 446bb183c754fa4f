// `rinfer tokenize <model> [--ids|--pieces|--json] [--no-special] TEXT` and
// `rinfer detokenize <model> IDS...`: the model's tokenizer from the command line.
#include <fmt/format.h>

#include <cstdio>
#include <iostream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/strings.h"
#include "formats/gguf.h"
#include "formats/model_cache.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/wordpiece.h"
#include "tools/input.h"
#include "tools/output.h"
#include "tools/tools.h"

namespace rinfer {

namespace {

// A decoder's tokenizer (BPE, SentencePiece) or an encoder's (WordPiece): exactly one is set.
struct LoadedTokenizer {
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<WordPieceTokenizer> wordpiece;
  std::optional<GgufFile> gguf;  // for the chat template

  std::string describe() const {
    return wordpiece ? wordpiece->describe() : tokenizer->describe();
  }
  std::string_view piece(int32_t id) const {
    return wordpiece ? wordpiece->piece(id) : tokenizer->piece(id);
  }
  std::string_view token_text(int32_t id) const {
    return wordpiece ? wordpiece->piece(id) : tokenizer->token_text(id);
  }
  Result<std::string> decode(std::span<const int32_t> ids, bool skip_special) const {
    return wordpiece ? wordpiece->decode(ids, skip_special) : tokenizer->decode(ids, skip_special);
  }
};

Result<LoadedTokenizer> load_tokenizer(const std::string& model) {
  RINFER_ASSIGN_OR_RETURN(std::string path, resolve_model(model));
  LoadedTokenizer out;
  if (path.ends_with(".gguf")) {
    RINFER_ASSIGN_OR_RETURN(GgufFile file, GgufFile::open(path));
    RINFER_ASSIGN_OR_RETURN(out.tokenizer, Tokenizer::from_gguf(file));
    out.gguf.emplace(std::move(file));
    return out;
  }
  auto t = Tokenizer::load(path);
  if (t.ok()) {
    out.tokenizer = std::move(t).value();
    return out;
  }
  // A BERT-family encoder's tokenizer.json (WordPiece): the decoders' loader refuses it.
  if (t.status().code() == StatusCode::kUnsupported) {
    if (auto w = WordPieceTokenizer::load(path); w.ok()) {
      out.wordpiece = std::move(w).value();
      return out;
    }
  }
  return t.status();
}

// WordPiece ids: [CLS] pieces [SEP], or the pieces alone (--no-special).
Result<std::vector<int32_t>> encode_wordpiece(const WordPieceTokenizer& w, const std::string& text,
                                              bool special) {
  if (!special) return w.encode_pieces(text);
  RINFER_ASSIGN_OR_RETURN(TokenEncoding e, w.encode(text, std::numeric_limits<int64_t>::max()));
  return e.ids;
}

Result<std::vector<int32_t>> parse_ids(const std::vector<std::string>& args) {
  std::vector<int32_t> ids;
  for (const auto& arg : args) {
    std::string s = arg;
    for (char& c : s) {
      if (c == ',' || c == '[' || c == ']') c = ' ';
    }
    std::istringstream in(s);
    std::string word;
    while (in >> word) {
      size_t used = 0;
      long long v = 0;
      bool ok = true;
      try {
        v = std::stoll(word, &used);
      } catch (...) {
        ok = false;
      }
      if (!ok || used != word.size() || v < INT32_MIN || v > INT32_MAX) {
        return Status(StatusCode::kInvalidArgument, fmt::format("'{}' is not a token id", word));
      }
      ids.push_back(static_cast<int32_t>(v));
    }
  }
  return ids;
}

struct TokenizeArgs {
  std::string model;
  std::string text;
  bool ids = false;
  bool pieces = false;
  bool json = false;
  bool no_special = false;
  bool allow_invalid = false;
  bool chat = false;
  bool allow_special = false;
  std::string system;
  std::string chat_template;
};

// The ids in the form the flags ask for.
int print_tokens(const LoadedTokenizer& tok, const Result<std::vector<int32_t>>& ids,
                 const TokenizeArgs& a) {
  if (!ids.ok()) return report_error(ids.status().message());
  if (a.json) {
    nlohmann::ordered_json j;
    j["tokenizer"] = tok.describe();
    j["n_tokens"] = ids->size();
    j["ids"] = ids.value();
    nlohmann::ordered_json pieces = nlohmann::ordered_json::array();
    for (int32_t id : ids.value()) pieces.push_back(std::string(tok.piece(id)));
    j["pieces"] = pieces;
    std::cout << json_text(j, -1) << "\n";
  } else if (a.ids) {
    std::string line;
    for (size_t i = 0; i < ids->size(); ++i) line += (i ? " " : "") + std::to_string((*ids)[i]);
    std::cout << line << "\n";
  } else if (a.pieces) {
    for (int32_t id : ids.value()) std::cout << display_text(tok.piece(id)) << "\n";
  } else {
    for (int32_t id : ids.value()) {
      std::cout << fmt::format("{:>7}  '{}'\n", id, display_text(tok.token_text(id)));
    }
  }
  return 0;
}

int run_tokenize(const TokenizeArgs& a) {
  std::string text = a.text;
  if (text == "-") {
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  }
  if (Status st = check_utf8(text, a.text == "-" ? "stdin" : "TEXT", a.allow_invalid);
      !st.ok()) {
    return report_error(st.message());
  }
  if (Status st = check_utf8(a.system, "--system", a.allow_invalid); !st.ok()) {
    return report_error(st.message());
  }
  auto loaded = load_tokenizer(a.model);
  if (!loaded.ok()) return report_error(loaded.status().message());
  if (loaded->wordpiece) {
    if (a.chat) return report_error("--chat needs a GGUF model (for its chat template)");
    return print_tokens(*loaded, encode_wordpiece(*loaded->wordpiece, text, !a.no_special), a);
  }
  const Tokenizer& tok = *loaded->tokenizer;
  EncodeOptions options;
  std::vector<TextRange> chat_content;
  std::span<const std::string_view> chat_markers;
  options.add_special = !a.no_special;
  options.parse_special = !a.no_special;
  if (a.chat) {
    if (!loaded->gguf) return report_error("--chat needs a GGUF model (for its chat template)");
    std::string note;
    auto tmpl = ChatTemplate::for_model(*loaded->gguf, a.chat_template, &note);
    if (!tmpl.ok()) return report_error(tmpl.status().message());
    std::fprintf(stderr, "rinfer: %s\n", note.c_str());
    std::vector<ChatMessage> messages;
    if (!a.system.empty()) messages.push_back({"system", a.system});
    messages.push_back({"user", text});
    auto prompt = tmpl->render(messages, true);
    if (!prompt.ok()) return report_error(prompt.status().message());
    text = std::move(prompt->text);
    chat_content = std::move(prompt->content);
    chat_markers = prompt->markers;
    options.parse_special = true;
  }
  // With --chat the messages are plain text unless --allow-special, as in `rinfer run`.
  if (a.chat && !a.allow_special) {
    options.plain_ranges = chat_content;
    options.markers = chat_markers;
  }
  return print_tokens(*loaded, tok.encode(text, options), a);
}

}  // namespace

void add_tokenize_commands(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<TokenizeArgs>();
  auto* cmd = app.add_subcommand("tokenize", "Encode text with a model's tokenizer");
  cmd->add_option("model", a->model, "A GGUF file, tokenizer.json, HF directory or cached name")
      ->required();
  cmd->add_option("text", a->text, "The text, or - to read stdin")->required();
  auto* ids_flag = cmd->add_flag("--ids", a->ids, "Print the ids on one line");
  auto* pieces = cmd->add_flag("--pieces", a->pieces, "Print each token's vocabulary string");
  auto* json = cmd->add_flag("--json", a->json, "Print JSON: ids and pieces");
  ids_flag->excludes(pieces, json);
  pieces->excludes(json);
  cmd->add_flag("--no-special", a->no_special,
                "Treat special-token text as plain text and add no BOS/EOS");
  cmd->add_flag("--allow-invalid-utf8", a->allow_invalid,
                "Encode input that is not valid UTF-8 as raw bytes (default: an error)");
  cmd->add_flag("--chat", a->chat,
                "Format TEXT as a user message with the model's chat template first");
  cmd->add_option("--system", a->system, "With --chat: a system message");
  cmd->add_flag("--allow-special", a->allow_special,
                "With --chat: parse control-token text in the messages as control tokens");
  cmd->add_option("--chat-template", a->chat_template,
                  "With --chat: the template family instead of the model's (chatml, gemma)")
      ->check(CLI::IsMember({"chatml", "gemma"}));
  cmd->callback([&exit_code, a] { exit_code = run_tokenize(*a); });

  auto model = std::make_shared<std::string>();
  auto id_args = std::make_shared<std::vector<std::string>>();
  auto skip_special = std::make_shared<bool>(false);
  auto raw = std::make_shared<bool>(false);
  auto* det = app.add_subcommand("detokenize", "Decode token ids to text");
  det->add_option("model", *model, "A GGUF file, tokenizer.json, HF directory or cached name")
      ->required();
  det->add_option("ids", *id_args, "Token ids (separated by spaces or commas)")->required();
  det->add_flag("--skip-special", *skip_special, "Leave out control tokens");
  det->add_flag("--raw", *raw, "Print the bytes exactly, without a final newline");
  det->callback([&exit_code, model, id_args, skip_special, raw] {
    auto ids = parse_ids(*id_args);
    if (!ids.ok()) {
      exit_code = report_error(ids.status().message());
      return;
    }
    auto loaded = load_tokenizer(*model);
    if (!loaded.ok()) {
      exit_code = report_error(loaded.status().message());
      return;
    }
    auto text = loaded->decode(ids.value(), *skip_special);
    if (!text.ok()) {
      exit_code = report_error(text.status().message());
      return;
    }
    std::cout << text.value();
    if (!*raw) std::cout << "\n";
    std::cout.flush();
    exit_code = 0;
  });
}

}  // namespace rinfer
