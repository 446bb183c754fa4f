// End-to-end tests of `rinfer embed`, `rinfer index` and `rinfer search` with the real
// all-MiniLM-L6-v2: an index of 300 news sentences (flat and HNSW) finds each query's own
// sentence first and sensible neighbours, the approximate index agrees with the exact one, and
// malformed corpora and damaged index directories are refused with errors naming what and where.
// (80 sentences under the sanitizers.)
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "search/corpus.h"
#include "search/vector_index.h"
#include "test_util.h"

namespace rinfer {
namespace {

namespace fs = std::filesystem;

// Under the sanitizers (the debug preset) the encoder is some 30x slower: a smaller corpus.
#if !defined(NDEBUG) && defined(__SANITIZE_ADDRESS__)
constexpr size_t kCorpus = 80;
#else
constexpr size_t kCorpus = 300;
#endif

const std::string kRecipe =
    test::source_dir() + "/recipes/embedding/all-minilm-l6-v2/optimized.yaml";

test::CommandResult rinfer(const std::string& args) {
  return test::run_command(std::string(RINFER_BINARY) + " " + args);
}

#define REQUIRE_MINILM()                                             \
  if (!test::reference_model("all-minilm-l6-v2")) {                  \
    GTEST_SKIP() << test::missing_model_message("all-minilm-l6-v2"); \
  }

// The first n single-line texts of the embedding fixture (news sentences first).
std::vector<std::string> sentences(size_t n) {
  std::ifstream f(test::test_data_path("embedding/minilm_reference.json"), std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(ss.str());
  std::vector<std::string> out;
  for (const auto& t : j["texts"]) {
    const std::string s = t.get<std::string>();
    if (s.find('\n') == std::string::npos && s.size() > 20) out.push_back(s);
    if (out.size() == n) break;
  }
  return out;
}

std::string corpus_file(const std::string& name, const std::vector<std::string>& lines) {
  std::string body;
  for (const std::string& l : lines) body += l + "\n";
  return test::write_temp_file(name, body);
}

std::string temp_dir(const std::string& name) {
  return (fs::path(test::write_temp_file(name + ".x", "")).parent_path() / name).string();
}

TEST(SearchCli, IndexesAndFindsEachSentenceFirst) {
  REQUIRE_MINILM();
  const auto docs = sentences(kCorpus);
  ASSERT_EQ(docs.size(), kCorpus);
  const std::string corpus = corpus_file("news.txt", docs);
  for (const char* kind : {"flat", "hnsw"}) {
    const std::string dir = temp_dir(std::string("idx_") + kind);
    auto r = rinfer("index " + kRecipe + " " + corpus + " -o " + dir + " --kind " + kind);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find(std::to_string(kCorpus) + " documents"), std::string::npos) << r.err;
    for (size_t q : {size_t{0}, size_t{57}, kCorpus - 1}) {
      auto s = rinfer("search " + dir + " --json -k 3 \"" + docs[q] + "\"");
      ASSERT_EQ(s.exit_code, 0) << s.err;
      const auto j = nlohmann::json::parse(s.out);
      ASSERT_EQ(j[0]["results"].size(), 3u);
      EXPECT_EQ(j[0]["results"][0]["id"], std::to_string(q + 1)) << kind << " " << docs[q];
      EXPECT_GT(j[0]["results"][0]["score"].get<double>(), 0.999);
      EXPECT_GE(j[0]["results"][0]["score"].get<double>(),
                j[0]["results"][1]["score"].get<double>());
    }
    // A paraphrase finds the sentence it paraphrases.
    auto p =
        rinfer("search " + dir + " --json -k 5 \"bushfires forced people to leave their homes\"");
    ASSERT_EQ(p.exit_code, 0) << p.err;
    const auto pj = nlohmann::json::parse(p.out);
    const std::string top = pj[0]["results"][0]["text"];
    EXPECT_TRUE(top.find("fire") != std::string::npos || top.find("blaze") != std::string::npos)
        << top;
    auto text = rinfer("search " + dir + " \"a storm\" -k 2");
    ASSERT_EQ(text.exit_code, 0) << text.err;
    EXPECT_NE(text.out.find("query: a storm"), std::string::npos) << text.out;
  }
}

TEST(SearchCli, MalformedCorporaNameTheLine) {
  REQUIRE_MINILM();
  struct Case {
    std::string name, body, expect;
  };
  const Case cases[] = {
      {"empty_line.txt", "one\n\ntwo\n", ":2: empty line"},
      {"blank_line.txt", "one\n   \n", ":2: empty line"},
      {"bad_utf8.txt",
       "one\ntw\xff"
       "o\n",
       ":2: not valid UTF-8 (byte 2"},
      {"empty.txt", "", "no documents"},
      {"bad.jsonl", "{\"text\": \"a\"}\nnot json\n", ":2: not a JSON object"},
      {"notext.jsonl", "{\"id\": 1}\n", ":1: \"text\" is missing"},
      {"badid.jsonl", "{\"id\": [1], \"text\": \"a\"}\n", ":1: \"id\" must be"},
      {"dup.jsonl", "{\"id\": \"x\", \"text\": \"a\"}\n{\"id\": \"x\", \"text\": \"b\"}\n",
       ":2: id 'x' appears twice"},
  };
  for (const Case& c : cases) {
    const std::string path = test::write_temp_file(c.name, c.body);
    auto r = rinfer("index " + kRecipe + " " + path + " -o " + temp_dir("bad_" + c.name));
    EXPECT_EQ(r.exit_code, 1) << c.name;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << c.name << ": " << r.err;
    EXPECT_NE(r.err.find(c.name), std::string::npos) << r.err;
  }
}

// Blank inputs are refused alike, as TEXT arguments and as lines of --file, naming which.
TEST(SearchCli, EmbedRefusesBlankInputsAsArgumentsAndLines) {
  REQUIRE_MINILM();
  auto r = rinfer("embed " + kRecipe + " 'a cat' ''");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("TEXT 2 is empty (each TEXT is one input; remove it)"), std::string::npos)
      << r.err;
  r = rinfer("embed " + kRecipe + " '   '");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("TEXT 1 is empty"), std::string::npos) << r.err;
  const std::string path = test::write_temp_file("embed_blank.txt", "a cat\n\na dog\n");
  r = rinfer("embed " + kRecipe + " --file " + path);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("embed_blank.txt:2: empty line"), std::string::npos) << r.err;
  EXPECT_EQ(rinfer("embed " + kRecipe + " 'a cat'").exit_code, 0);
}

TEST(SearchCli, DamagedIndexesAreRefused) {
  REQUIRE_MINILM();
  const std::string corpus = corpus_file("news40.txt", sentences(40));
  const std::string dir = temp_dir("idx_damaged");
  ASSERT_EQ(rinfer("index " + kRecipe + " " + corpus + " -o " + dir).exit_code, 0);
  ASSERT_EQ(rinfer("search " + dir + " x").exit_code, 0);
  const fs::path index = fs::path(dir) / "index.faiss";
  const auto size = fs::file_size(index);
  fs::resize_file(index, size / 2);
  auto r = rinfer("search " + dir + " x");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("truncated or altered"), std::string::npos) << r.err;
  fs::remove(fs::path(dir) / "meta.json");
  r = rinfer("search " + dir + " x");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("meta.json"), std::string::npos) << r.err;
  r = rinfer("search /nonexistent/index x");
  EXPECT_NE(r.err.find("not an index directory"), std::string::npos) << r.err;
  r = rinfer("search " + dir + " $'\\xff'");
  EXPECT_EQ(r.exit_code, 1);
}

TEST(SearchCli, EmbedPrintsVectorsAndSimilarities) {
  REQUIRE_MINILM();
  auto r = rinfer("embed " + kRecipe + " --json \"A man is eating food.\" \"A man eats.\"");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["dim"], 384);
  ASSERT_EQ(j["data"].size(), 2u);
  EXPECT_EQ(j["data"][0]["embedding"].size(), 384u);
  auto t =
      rinfer("embed " + kRecipe + " \"A man is eating food.\" \"A man eats.\" \"Stocks fell.\"");
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_NE(t.out.find("cosine similarity"), std::string::npos) << t.out;
  EXPECT_EQ(rinfer("embed " + kRecipe).exit_code, 1);
  auto llm =
      rinfer("embed " + test::source_dir() + "/recipes/llm-chat/smollm2-135m/optimized.yaml x");
  EXPECT_EQ(llm.exit_code, 1);
  EXPECT_NE(llm.err.find("not embedding"), std::string::npos) << llm.err;
}

TEST(VectorIndex, RecallOfHnswAgainstFlatOnRandomVectors) {
  const int64_t dim = 32, n = 2000, nq = 50;
  auto data = test::random_floats(static_cast<size_t>(n * dim), 7);
  for (int64_t i = 0; i < n; ++i) {  // unit vectors: inner product = cosine
    double norm = 0;
    for (int64_t d = 0; d < dim; ++d)
      norm +=
          double(data[static_cast<size_t>(i * dim + d)]) * data[static_cast<size_t>(i * dim + d)];
    for (int64_t d = 0; d < dim; ++d)
      data[static_cast<size_t>(i * dim + d)] /= static_cast<float>(std::sqrt(norm));
  }
  auto flat = search::VectorIndex::create(dim, {search::IndexKind::kFlat});
  auto hnsw = search::VectorIndex::create(dim, {search::IndexKind::kHnsw, 16, 100, 64});
  ASSERT_TRUE(flat.ok() && hnsw.ok());
  ASSERT_TRUE((*flat)->add(data.data(), n).ok());
  ASSERT_TRUE((*hnsw)->add(data.data(), n).ok());
  auto q = test::random_floats(static_cast<size_t>(nq * dim), 8);
  auto a = (*flat)->search(q.data(), nq, 10);
  auto b = (*hnsw)->search(q.data(), nq, 10);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(search::recall_at_k(*a, *a, 10), 1.0);
  EXPECT_GT(search::recall_at_k(*a, *b, 10), 0.8);
  // The exact top hit of a stored vector is itself.
  auto self = (*flat)->search(data.data() + 5 * dim, 1, 1);
  ASSERT_TRUE(self.ok());
  EXPECT_EQ((*self)[0][0].row, 5);
  EXPECT_FALSE((*flat)->search(q.data(), 1, 0).ok());
  EXPECT_FALSE(search::VectorIndex::create(0, {}).ok());
}

}  // namespace
}  // namespace rinfer
