// GGUF reader robustness: every truncation fails cleanly, and corrupted headers either parse
// into something self-consistent or fail with a message; never a crash, hang or huge
// allocation (run under ASan+UBSan, which also caps allocations below).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <random>
#include <string>

#include "core/mapped_file.h"
#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "test_util.h"

// Under ASan, allocations over 512 MB are reported as errors (tests/asan_limits.cpp), so the
// readers must check declared sizes against the input before allocating.

namespace rinfer {
namespace {

using Value = GgufWriter::Value;

// A valid file with numeric, string, bool and nested metadata arrays and a few tensors.
std::string sample_file() {
  GgufWriter w(3, 32);
  w.set("general.architecture", Value::string("llama"));
  w.set("llama.block_count", Value::of<uint32_t>(2));
  w.set("llama.rope.freq_base", Value::of<float>(10000.0f));
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  for (int i = 0; i < 24; ++i) {
    tokens.push_back("tok" + std::to_string(i * 37));
    scores.push_back(-0.5f * static_cast<float>(i));
    types.push_back(i % 3);
  }
  w.set("tokenizer.ggml.tokens", Value::strings_array(tokens));
  w.set("tokenizer.ggml.scores", Value::array(scores));
  w.set("tokenizer.ggml.token_type", Value::array(types));
  w.set("tokenizer.ggml.add_bos_token", Value::of<bool>(true));
  w.set("x.flags", Value::array(std::vector<bool>{true, false, true, true}));
  w.set("x.nested", Value::arrays({Value::array(std::vector<uint64_t>{1, 2}),
                                   Value::arrays({Value::strings_array({"a", "bc"})})}));
  w.set("x.i64", Value::of<int64_t>(-7));
  w.set("x.f64", Value::of<double>(2.5));
  const std::vector<std::pair<DType, std::vector<int64_t>>> specs = {{DType::kF32, {4, 8}},
                                                                     {DType::kQ4_0, {2, 32}},
                                                                     {DType::kQ8_0, {1, 64}},
                                                                     {DType::kQ4_K, {1, 256}},
                                                                     {DType::kF16, {3}}};
  for (size_t i = 0; i < specs.size(); ++i) {
    const auto& [dtype, shape] = specs[i];
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<uint8_t> b =
        test::random_bytes(*dtype_row_bytes(dtype, static_cast<uint64_t>(n)), 7 + i);
    Status s = w.add_tensor("blk." + std::to_string(i) + ".weight", dtype, shape,
                            std::string(b.begin(), b.end()));
    EXPECT_TRUE(s.ok()) << s.to_string();
  }
  Result<std::string> bytes = w.to_bytes();
  EXPECT_TRUE(bytes.ok()) << bytes.status().to_string();
  return *bytes;
}

Result<GgufFile> parse(std::string bytes, const std::string& name) {
  return GgufFile::parse(MappedFile::from_bytes(name, std::move(bytes)));
}

// Touches everything a successful parse hands out and checks it is self-consistent.
void check_consistent(const GgufFile& f) {
  const MappedFile& m = *f.file();
  auto inside = [&](const void* p, size_t n) {
    const auto* q = static_cast<const uint8_t*>(p);
    return n == 0 || (q >= m.data() && q + n <= m.data() + m.size());
  };
  for (const auto& [key, value] : f.metadata()) {
    ASSERT_TRUE(inside(key.data(), key.size()));
    EXPECT_EQ(f.find(key), &value);
    (void)value.to_display(4);
    if (value.as_string())
      ASSERT_TRUE(inside(value.as_string()->data(), value.as_string()->size()));
    ASSERT_TRUE(inside(value.array_bytes().data(), value.array_bytes().size()));
    if (!value.array_bytes().empty()) (void)value.to_vector<double>();
    for (std::string_view s : value.array_strings()) ASSERT_TRUE(inside(s.data(), s.size()));
  }
  EXPECT_TRUE(std::has_single_bit(f.alignment()));
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const GgufTensorInfo& t : f.tensors()) {
    ASSERT_TRUE(inside(t.data, t.nbytes));
    ASSERT_GT(t.nbytes, 0u);
    EXPECT_EQ(f.find_tensor(t.name), &t);
    EXPECT_EQ(t.offset % f.alignment(), 0u);
    ASSERT_EQ(*dtype_row_bytes(t.dtype, static_cast<uint64_t>(t.ne[0])) *
                  static_cast<uint64_t>(t.n_elements / t.ne[0]),
              t.nbytes);
    ranges.emplace_back(t.offset, t.offset + t.nbytes);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) EXPECT_LE(ranges[i - 1].second, ranges[i].first);
}

TEST(GgufFuzz, EveryTruncationFails) {
  const std::string bytes = sample_file();
  Result<GgufFile> full = parse(bytes, "full.gguf");
  ASSERT_TRUE(full.ok()) << full.status().to_string();
  check_consistent(*full);
  const uint64_t data_offset = full->data_offset();
  uint64_t data_end = data_offset;
  for (const GgufTensorInfo& t : full->tensors()) {
    data_end = std::max(data_end, data_offset + t.offset + t.nbytes);
  }
  ASSERT_GT(data_offset, 600u);  // big enough to be interesting
  ASSERT_LE(data_end, bytes.size());

  auto expect_fails = [&](size_t len) {
    Result<GgufFile> r = parse(bytes.substr(0, len), "trunc.gguf");
    ASSERT_FALSE(r.ok()) << "prefix of " << len << " bytes parsed";
    const std::string& m = r.status().message();
    EXPECT_EQ(m.rfind("trunc.gguf: ", 0), 0u) << m;
    EXPECT_TRUE(m.find("past the end of the file") != std::string::npos ||
                m.find("cannot fit") != std::string::npos)
        << "prefix " << len << ": " << m;
  };
  // Every byte of the header, metadata, tensor infos and padding.
  for (size_t len = 0; len <= data_offset; ++len) expect_fails(len);
  // Random points inside the tensor data.
  std::mt19937_64 rng(1234);
  for (int i = 0; i < 200; ++i) {
    expect_fails(data_offset + 1 + rng() % (data_end - data_offset - 1));
  }
  // Only the padding after the last tensor may go.
  for (size_t len = data_end; len <= bytes.size(); ++len) {
    EXPECT_TRUE(parse(bytes.substr(0, len), "t.gguf").ok()) << len;
  }

  // A few messages in full.
  Result<GgufFile> r = parse(bytes.substr(0, 10), "trunc.gguf");
  EXPECT_EQ(r.status().message(),
            "trunc.gguf: tensor count runs past the end of the file (offset 8, needs 8 bytes, "
            "file size 10)");
  r = parse(bytes.substr(0, data_offset - 1), "trunc.gguf");
  EXPECT_NE(r.status().message().find("padding after the tensor infos"), std::string::npos)
      << r.status().message();
  r = parse(bytes.substr(0, data_end - 1), "trunc.gguf");
  EXPECT_NE(r.status().message().find("tensor 'blk."), std::string::npos) << r.status().message();
}

TEST(GgufFuzz, RandomByteFlipsInHeader) {
  const std::string bytes = sample_file();
  Result<GgufFile> full = parse(bytes, "full.gguf");
  ASSERT_TRUE(full.ok());
  const uint64_t region = full->data_offset();
  int parsed = 0;
  for (uint64_t seed = 0; seed < 2000; ++seed) {
    std::mt19937_64 rng(seed);
    std::string b = bytes;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < flips; ++i) {
      const uint64_t pos = rng() % region;
      b[pos] = static_cast<char>(b[pos] ^ static_cast<char>(1 + rng() % 255));
    }
    Result<GgufFile> r = parse(std::move(b), "flip.gguf");
    if (r.ok()) {
      ++parsed;
      check_consistent(*r);
    } else {
      EXPECT_EQ(r.status().message().rfind("flip.gguf: ", 0), 0u) << r.status().message();
    }
    if (testing::Test::HasFatalFailure()) FAIL() << "seed " << seed;
  }
  // Flips inside string bytes and float values still parse; most others do not.
  std::printf("%d of 2000 corrupted files parsed\n", parsed);
  EXPECT_GT(parsed, 0);
  EXPECT_LT(parsed, 2000);
}

TEST(GgufFuzz, EveryHeaderByteSetToExtremes) {
  // Setting the top byte of any length, count or offset to 0xff or 0x80 must be caught by the
  // size checks before anything is allocated.
  const std::string bytes = sample_file();
  Result<GgufFile> full = parse(bytes, "full.gguf");
  ASSERT_TRUE(full.ok());
  for (uint64_t pos = 0; pos < full->data_offset(); ++pos) {
    for (unsigned char v : {0x00, 0x01, 0x7f, 0x80, 0xff}) {
      std::string b = bytes;
      b[pos] = static_cast<char>(v);
      Result<GgufFile> r = parse(std::move(b), "x.gguf");
      if (r.ok()) check_consistent(*r);
      if (testing::Test::HasFatalFailure()) FAIL() << "byte " << pos << " = " << int{v};
    }
  }
}

}  // namespace
}  // namespace rinfer
