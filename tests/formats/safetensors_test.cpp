#include "formats/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "formats/hf_config.h"
#include "test_util.h"

namespace rinfer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kName = "t.safetensors";

// ------------------------------------------------------------------------------ file builders

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}

// 8-byte length, header text, buffer: no validation, for malformed files.
std::string raw_file(const std::string& header, const std::string& buffer = "") {
  return le64(header.size()) + header + buffer;
}

struct Spec {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
};

uint64_t elem_size(const std::string& dtype) {
  if (dtype == "F64" || dtype == "I64") return 8;
  if (dtype == "F32" || dtype == "I32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16") return 2;
  return 1;  // I8 U8 BOOL F8_E4M3 F8_E5M2
}

uint64_t numel_of(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

// A valid file: tensors back to back in `specs` order, filled with deterministic non-zero bytes,
// the header padded with spaces so the buffer starts 8-byte aligned.
std::string build(const std::vector<Spec>& specs,
                  const std::map<std::string, std::string>& metadata = {}) {
  json h = json::object();
  std::string buf;
  for (const auto& s : specs) {
    const uint64_t n = numel_of(s.shape) * elem_size(s.dtype);
    h[s.name] = {
        {"dtype", s.dtype}, {"shape", s.shape}, {"data_offsets", {buf.size(), buf.size() + n}}};
    for (uint64_t i = 0; i < n; ++i)
      buf.push_back(static_cast<char>(1 + (i * 7 + s.name.size()) % 251));
  }
  if (!metadata.empty()) h["__metadata__"] = metadata;
  std::string text = h.dump();
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');
  return raw_file(text, buf);
}

Result<SafetensorsFile> parse_bytes(std::string bytes, const std::string& name = kName) {
  return SafetensorsFile::parse(MappedFile::from_bytes(name, std::move(bytes)));
}

// The parse failed, the message starts with the path and contains every substring.
template <typename T>
testing::AssertionResult fails_with(const Result<T>& r, const std::string& path,
                                    std::initializer_list<std::string_view> substrings) {
  if (r.ok()) return testing::AssertionFailure() << "parsed OK, expected an error";
  const std::string& m = r.status().message();
  if (!m.starts_with(path)) {
    return testing::AssertionFailure() << "message does not start with '" << path << "': " << m;
  }
  for (auto s : substrings) {
    if (m.find(s) == std::string::npos) {
      return testing::AssertionFailure() << "message lacks '" << s << "': " << m;
    }
  }
  return testing::AssertionSuccess() << m;
}

testing::AssertionResult header_fails(const std::string& header, const std::string& buffer,
                                      std::initializer_list<std::string_view> substrings) {
  return fails_with(parse_bytes(raw_file(header, buffer)), kName, substrings);
}

// One F32 tensor "a" of shape [2] with the given entry fields replaced.
std::string one_tensor(const std::string& dtype = R"("F32")", const std::string& shape = "[2]",
                       const std::string& offsets = "[0, 8]") {
  return R"({"a": {"dtype": )" + dtype + R"(, "shape": )" + shape + R"(, "data_offsets": )" +
         offsets + "}}";
}

fs::path fresh_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("rinfer_st_" + std::to_string(::getpid())) / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << p;
}

// ------------------------------------------------------------------------------- valid files

TEST(Safetensors, EveryDType) {
  const std::vector<std::pair<std::string, DType>> all = {
      {"F32", DType::kF32},   {"F16", DType::kF16},        {"BF16", DType::kBF16},
      {"F64", DType::kF64},   {"I8", DType::kI8},          {"U8", DType::kU8},
      {"I16", DType::kI16},   {"I32", DType::kI32},        {"I64", DType::kI64},
      {"BOOL", DType::kBool}, {"F8_E4M3", DType::kF8E4M3}, {"F8_E5M2", DType::kF8E5M2}};
  std::vector<Spec> specs;
  specs.reserve(all.size());
  for (const auto& [name, dt] : all) specs.push_back({"t_" + name, name, {3, 2}});
  const std::string bytes = build(specs);
  auto r = parse_bytes(bytes);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->tensors().size(), all.size());
  for (const auto& [name, dt] : all) {
    const SafetensorsTensor* t = r->find("t_" + name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->dtype, dt) << name;
    EXPECT_EQ(t->shape, (std::vector<int64_t>{3, 2}));
    EXPECT_EQ(t->numel, 6u);
    EXPECT_EQ(t->nbytes, 6 * elem_size(name)) << name;
    EXPECT_EQ(safetensors_dtype_name(dt), name);
    EXPECT_EQ(safetensors_dtype_from_name(name), dt);
  }
  // Tensors come in offset order, which is the build order here.
  for (size_t i = 0; i < specs.size(); ++i) EXPECT_EQ(r->tensors()[i].name, specs[i].name);
  EXPECT_EQ(safetensors_dtype_from_name("f32"), std::nullopt);  // case-sensitive
  EXPECT_EQ(safetensors_dtype_name(DType::kQ4_0), "");
}

TEST(Safetensors, ScalarsAndZeroSizeDims) {
  auto r = parse_bytes(build({{"scalar", "F32", {}},
                              {"empty", "F16", {0, 5}},
                              {"empty3", "I64", {4, 0, 3}},
                              {"vec", "U8", {5}}}));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const auto* s = r->find("scalar");
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(s->shape.empty());
  EXPECT_EQ(s->numel, 1u);
  EXPECT_EQ(s->nbytes, 4u);
  const auto* e = r->find("empty");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->shape, (std::vector<int64_t>{0, 5}));
  EXPECT_EQ(e->numel, 0u);
  EXPECT_EQ(e->nbytes, 0u);
  EXPECT_EQ(r->find("empty3")->nbytes, 0u);
  EXPECT_EQ(r->find("vec")->nbytes, 5u);
  EXPECT_EQ(r->find("missing"), nullptr);
  EXPECT_EQ(r->buffer_size(), 9u);
}

TEST(Safetensors, ZeroDimBesideHugeDimsIsEmpty) {
  // The partial product overflows, but the element count is 0.
  auto r = parse_bytes(raw_file(one_tensor(R"("F32")", "[4294967296, 4294967296, 0]", "[0, 0]")));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->tensors()[0].nbytes, 0u);
}

TEST(Safetensors, Metadata) {
  auto r = parse_bytes(build({{"w", "F32", {2}}}, {{"format", "pt"}, {"note", "h\u00e9llo"}}));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->metadata().size(), 2u);
  EXPECT_EQ(r->metadata().at("format"), "pt");
  EXPECT_EQ(r->metadata().at("note"), "h\u00e9llo");
  EXPECT_EQ(r->tensors().size(), 1u);  // __metadata__ is not a tensor
  EXPECT_EQ(r->find("__metadata__"), nullptr);
}

TEST(Safetensors, EmptyHeaderAndMetadataOnly) {
  auto empty = parse_bytes(raw_file("{}"));
  ASSERT_TRUE(empty.ok()) << empty.status().to_string();
  EXPECT_TRUE(empty->tensors().empty());
  auto meta = parse_bytes(raw_file(R"({"__metadata__": {}}   )"));
  ASSERT_TRUE(meta.ok()) << meta.status().to_string();
  EXPECT_TRUE(meta->metadata().empty());
}

TEST(Safetensors, ZeroCopyFromFileSortedByOffset) {
  // "z" first in the buffer, "a" second: tensors() follows the buffer, not the names.
  const std::string bytes = build({{"z", "F32", {3}}, {"a", "I16", {2, 2}}});
  const std::string path = test::write_temp_file("zero_copy.safetensors", bytes);
  auto r = SafetensorsFile::open(path);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->path(), path);
  ASSERT_EQ(r->tensors().size(), 2u);
  EXPECT_EQ(r->tensors()[0].name, "z");
  EXPECT_EQ(r->tensors()[1].name, "a");
  const auto mapping = r->file();
  for (const auto& t : r->tensors()) {
    EXPECT_EQ(t.data, mapping->data() + r->buffer_offset() + t.offset);
    EXPECT_LE(t.data + t.nbytes, mapping->data() + mapping->size());
    EXPECT_EQ(std::memcmp(t.data, bytes.data() + r->buffer_offset() + t.offset, t.nbytes), 0);
  }
  EXPECT_EQ(r->buffer_offset() % 8, 0u);
  EXPECT_EQ(r->tensors()[1].offset, 12u);
  // The mapping outlives the SafetensorsFile through file().
  SafetensorsTensor z = r->tensors()[0];
  std::shared_ptr<const MappedFile> keep = r->file();
  r = Status(StatusCode::kCancelled, "drop");
  EXPECT_EQ(z.data[0], static_cast<uint8_t>(bytes[keep->size() - 20]));
}

TEST(Safetensors, OpenMissingFile) {
  auto r = SafetensorsFile::open("/nonexistent/dir/x.safetensors");
  EXPECT_TRUE(fails_with(r, "/nonexistent/dir/x.safetensors", {"no such file"}));
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
}

// ---------------------------------------------------------------------------- validation rules

TEST(SafetensorsValidation, FileShorterThan8Bytes) {
  for (size_t n = 0; n < 8; ++n) {
    EXPECT_TRUE(fails_with(parse_bytes(std::string(n, '\x01')), kName, {"too short"})) << n;
  }
}

TEST(SafetensorsValidation, HeaderLengthOverLimit) {
  EXPECT_TRUE(fails_with(parse_bytes(le64(kSafetensorsMaxHeaderBytes + 1) + "{}"), kName,
                         {"header length 100000001", "exceeds"}));
  EXPECT_TRUE(fails_with(parse_bytes(le64(std::numeric_limits<uint64_t>::max()) + "{}"), kName,
                         {"exceeds"}));
}

TEST(SafetensorsValidation, HeaderLengthPastEndOfFile) {
  EXPECT_TRUE(
      fails_with(parse_bytes(le64(100) + "{}"), kName, {"header length 100", "past the end"}));
  EXPECT_TRUE(fails_with(parse_bytes(le64(1)), kName, {"past the end"}));
}

TEST(SafetensorsValidation, InvalidJson) {
  EXPECT_TRUE(header_fails(R"({"a": )", "", {"not valid JSON at byte"}));
  EXPECT_TRUE(header_fails(R"({"a": 1,})", "", {"not valid JSON at byte 9"}));
  EXPECT_TRUE(header_fails("{\"a\xff\": 1}", "", {"not valid JSON"}));  // invalid UTF-8
  EXPECT_TRUE(header_fails(R"({} {})", "", {"not valid JSON"}));
  EXPECT_TRUE(header_fails("", "", {"not a JSON object"}));
}

TEST(SafetensorsValidation, HeaderNotAnObject) {
  EXPECT_TRUE(header_fails("[1, 2]", "", {"not a JSON object"}));
  EXPECT_TRUE(header_fails("\"s\"", "", {"not a JSON object"}));
  EXPECT_TRUE(header_fails(" {}", "", {"not a JSON object", "'{'"}));
}

TEST(SafetensorsValidation, EntryNotAnObject) {
  EXPECT_TRUE(header_fails(R"({"a": 5})", "", {"tensor 'a'", "entry is the integer 5"}));
  EXPECT_TRUE(header_fails(R"({"a": [1]})", "", {"tensor 'a'", "expected an object"}));
  // Names from the file are escaped and cut short in messages.
  EXPECT_TRUE(header_fails(R"({"a\u0001\u00e9": 5})", "", {"tensor 'a\\x01\\xc3\\xa9'"}));
  EXPECT_TRUE(
      header_fails("{\"" + std::string(5000, 'n') + "\": 5}", "", {"tensor 'nnnn", "nnn...'"}));
}

TEST(SafetensorsValidation, MissingFields) {
  EXPECT_TRUE(header_fails(R"({"a": {"shape": [2], "data_offsets": [0, 8]}})", std::string(8, 'x'),
                           {"tensor 'a'", "missing 'dtype'"}));
  EXPECT_TRUE(header_fails(R"({"a": {"dtype": "F32", "data_offsets": [0, 8]}})",
                           std::string(8, 'x'), {"tensor 'a'", "missing 'shape'"}));
  EXPECT_TRUE(header_fails(R"({"a": {"dtype": "F32", "shape": [2]}})", std::string(8, 'x'),
                           {"tensor 'a'", "missing 'data_offsets'"}));
}

TEST(SafetensorsValidation, WrongTypedFields) {
  const std::string buf(8, 'x');
  EXPECT_TRUE(header_fails(one_tensor("7"), buf, {"tensor 'a'", "'dtype' is the integer 7"}));
  EXPECT_TRUE(header_fails(one_tensor(R"("F32")", R"("2")"), buf,
                           {"tensor 'a'", "'shape' is the string", "expected an array"}));
  EXPECT_TRUE(header_fails(one_tensor(R"("F32")", "[2]", R"({"b": 0})"), buf,
                           {"tensor 'a'", "'data_offsets' is an object", "[begin, end]"}));
}

TEST(SafetensorsValidation, UnknownDType) {
  const std::string buf(8, 'x');
  EXPECT_TRUE(header_fails(one_tensor(R"("F33")"), buf, {"tensor 'a'", "unknown dtype 'F33'"}));
  EXPECT_TRUE(header_fails(one_tensor(R"("f32")"), buf, {"unknown dtype 'f32'"}));
  auto r = parse_bytes(raw_file(one_tensor(R"("U32")"), buf));
  EXPECT_TRUE(fails_with(r, kName, {"dtype 'U32' is not supported"}));
  EXPECT_EQ(r.status().code(), StatusCode::kUnsupported);
}

TEST(SafetensorsValidation, UnknownEntryKey) {
  EXPECT_TRUE(
      header_fails(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8], "extra": 1}})",
                   std::string(8, 'x'), {"tensor 'a'", "unknown key 'extra'"}));
}

TEST(SafetensorsValidation, BadShapeDims) {
  const std::string buf(8, 'x');
  EXPECT_TRUE(header_fails(one_tensor(R"("F32")", "[2, -1]"), buf,
                           {"tensor 'a'", "shape[1] is negative (-1)"}));
  EXPECT_TRUE(header_fails(one_tensor(R"("F32")", "[1.5]"), buf,
                           {"shape[0] is the non-integer number 1.5"}));
  EXPECT_TRUE(header_fails(one_tensor(R"("F32")", "[2.0]"), buf, {"shape[0]", "non-integer"}));
  EXPECT_TRUE(header_fails(one_tensor(R"("F32")", R"([1, "2"])"), buf, {"shape[1] is the string"}));
  EXPECT_TRUE(header_fails(one_tensor(R"("F32")", "[9223372036854775808]"), buf,
                           {"shape[0] is 9223372036854775808, larger than"}));
  EXPECT_TRUE(header_fails(one_tensor(R"("F32")", "[1e400]"), buf, {"not valid JSON"}));
}

TEST(SafetensorsValidation, ElementCountOverflow) {
  EXPECT_TRUE(header_fails(one_tensor(R"("U8")", "[4294967296, 4294967296]", "[0, 0]"), "",
                           {"tensor 'a'", "element count", "overflows 64 bits"}));
}

TEST(SafetensorsValidation, ByteSizeOverflow) {
  EXPECT_TRUE(header_fails(one_tensor(R"("F32")", "[4611686018427387904]", "[0, 0]"), "",
                           {"tensor 'a'", "byte size", "overflows 64 bits"}));
}

TEST(SafetensorsValidation, BadDataOffsets) {
  const std::string buf(8, 'x');
  EXPECT_TRUE(header_fails(one_tensor(R"("F32")", "[2]", "[0, 8, 16]"), buf,
                           {"'data_offsets' is an array of 3 elements", "[begin, end]"}));
  EXPECT_TRUE(header_fails(one_tensor(R"("F32")", "[2]", "[0]"), buf, {"[begin, end]"}));
  EXPECT_TRUE(header_fails(one_tensor(R"("F32")", "[2]", "[-8, 0]"), buf,
                           {"tensor 'a'", "data_offsets[0] is negative (-8)"}));
  EXPECT_TRUE(header_fails(one_tensor(R"("F32")", "[2]", "[0, 8.0]"), buf,
                           {"data_offsets[1] is the non-integer number"}));
  EXPECT_TRUE(header_fails(one_tensor(R"("F32")", "[0]", "[8, 0]"), buf,
                           {"tensor 'a'", "data_offsets [8, 0] begin after they end"}));
}

TEST(SafetensorsValidation, ByteCountMismatch) {
  EXPECT_TRUE(header_fails(one_tensor(R"("F32")", "[3]", "[0, 8]"), std::string(8, 'x'),
                           {"tensor 'a'", "hold 8 bytes, but F32 [3] needs 12"}));
}

TEST(SafetensorsValidation, TensorPastEndOfBuffer) {
  EXPECT_TRUE(header_fails(one_tensor(R"("F32")", "[2]", "[0, 8]"), std::string(7, 'x'),
                           {"tensor 'a'", "past the end of the 7-byte data buffer"}));
  EXPECT_TRUE(
      header_fails(one_tensor(R"("F32")", "[0]", "[9, 9]"), std::string(8, 'x'), {"past the end"}));
  EXPECT_TRUE(
      header_fails(one_tensor(R"("U8")", "[0]", "[18446744073709551615, 18446744073709551615]"), "",
                   {"past the end"}));
}

TEST(SafetensorsValidation, OverlappingTensors) {
  const std::string h = R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                            "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})";
  EXPECT_TRUE(header_fails(h, std::string(12, 'x'), {"'b' [4, 12) overlaps tensor 'a' [0, 8)"}));
  // A zero-size tensor inside another one also overlaps.
  const std::string z = R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                            "e": {"dtype": "F32", "shape": [0], "data_offsets": [4, 4]}})";
  EXPECT_TRUE(header_fails(z, std::string(8, 'x'), {"'e' [4, 4) overlaps tensor 'a'"}));
  // The same range twice.
  const std::string same = R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                               "b": {"dtype": "I32", "shape": [2], "data_offsets": [0, 8]}})";
  EXPECT_TRUE(header_fails(same, std::string(8, 'x'), {"overlaps"}));
}

TEST(SafetensorsValidation, HolesInBuffer) {
  const std::string gap = R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                              "b": {"dtype": "F32", "shape": [1], "data_offsets": [12, 16]}})";
  EXPECT_TRUE(header_fails(gap, std::string(16, 'x'),
                           {"hole in the data buffer: bytes [8, 12)", "before tensor 'b'"}));
  EXPECT_TRUE(header_fails(one_tensor(R"("F32")", "[2]", "[4, 12]"), std::string(12, 'x'),
                           {"hole", "bytes [0, 4)", "before tensor 'a'"}));
  EXPECT_TRUE(header_fails(one_tensor(), std::string(10, 'x'),
                           {"hole", "last 2 bytes [8, 10)", "belong to no tensor"}));
  EXPECT_TRUE(header_fails("{}", "abc", {"hole", "last 3 bytes"}));
}

TEST(SafetensorsValidation, DuplicateTensorName) {
  const std::string h = R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                            "a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})";
  EXPECT_TRUE(header_fails(h, std::string(8, 'x'), {"duplicate tensor name 'a'"}));
  EXPECT_TRUE(header_fails(
      R"({"a": {"dtype": "F32", "dtype": "I32", "shape": [1], "data_offsets": [0, 4]}})",
      std::string(4, 'x'), {"duplicate key 'dtype' inside 'a'"}));
  EXPECT_TRUE(header_fails(R"({"__metadata__": {"k": "1"}, "__metadata__": {}})", "",
                           {"duplicate tensor name '__metadata__'"}));
}

TEST(SafetensorsValidation, MetadataValues) {
  EXPECT_TRUE(header_fails(R"({"__metadata__": {"format": "pt", "n": 3}})", "",
                           {"__metadata__ key 'n' is the integer 3, expected a string"}));
  EXPECT_TRUE(header_fails(R"({"__metadata__": {"x": null}})", "", {"key 'x' is null"}));
  EXPECT_TRUE(header_fails(R"({"__metadata__": ["pt"]})", "",
                           {"__metadata__ is an array", "expected an object"}));
}

TEST(SafetensorsValidation, DeepNesting) {
  const std::string deep = R"({"a": )" + std::string(10000, '[') + std::string(10000, ']') + "}";
  EXPECT_TRUE(header_fails(deep, "", {"nested deeper than"}));
}

// ---------------------------------------------------------------------------------- robustness

std::string small_valid_file() {
  return build({{"tok_embd", "F16", {4, 3}}, {"norm", "F32", {3}}, {"ids", "I64", {2}}},
               {{"format", "pt"}});
}

TEST(SafetensorsRobustness, TruncatedAtEveryByte) {
  const std::string bytes = small_valid_file();
  ASSERT_TRUE(parse_bytes(bytes).ok());
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto r = parse_bytes(bytes.substr(0, n));
    EXPECT_TRUE(fails_with(r, kName, {})) << "truncated to " << n << " bytes";
  }
}

TEST(SafetensorsRobustness, RandomByteFlipsInHeader) {
  const std::string bytes = small_valid_file();
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[static_cast<size_t>(i)]);
  std::mt19937_64 rng(1234);
  int ok = 0;
  for (int iter = 0; iter < 1000; ++iter) {
    std::string b = bytes;
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int f = 0; f < flips; ++f) {
      const size_t pos = rng() % (8 + n);
      b[pos] = static_cast<char>(static_cast<uint8_t>(b[pos]) ^ (1u + rng() % 255));
    }
    auto r = parse_bytes(b);
    if (!r.ok()) {
      EXPECT_TRUE(r.status().message().starts_with(kName)) << r.status().message();
      continue;
    }
    ++ok;
    // Whatever parsed must still be in bounds and tile the buffer.
    uint64_t total = 0;
    for (const auto& t : r->tensors()) {
      EXPECT_GE(t.data, r->file()->data() + r->buffer_offset());
      EXPECT_LE(t.data + t.nbytes, r->file()->data() + r->file()->size());
      total += t.nbytes;
    }
    EXPECT_EQ(total, r->buffer_size());
  }
  // Flips in the padding or in names/metadata strings still parse; most flips do not.
  EXPECT_LT(ok, 1000);
}

// --------------------------------------------------------------------------- SafetensorsModel

TEST(SafetensorsModel, SingleFileAndDirectory) {
  const fs::path dir = fresh_dir("single");
  write_file(dir / "model.safetensors", build({{"w", "F32", {2, 2}}, {"b", "F32", {2}}}));
  for (const std::string& p : {(dir / "model.safetensors").string(), dir.string()}) {
    auto m = SafetensorsModel::open(p);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    EXPECT_FALSE(m->is_sharded());
    EXPECT_EQ(m->path(), p);
    EXPECT_EQ(m->shards().size(), 1u);
    EXPECT_EQ(m->tensors().size(), 2u);
    ASSERT_NE(m->find("w"), nullptr);
    EXPECT_EQ(m->find("w")->nbytes, 16u);
    EXPECT_EQ(m->total_bytes(), 24u);
    EXPECT_EQ(m->shard_of("b"), &m->shards()[0]);
  }
}

std::string index_json(const std::map<std::string, std::string>& weight_map) {
  return json{{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}}.dump(2);
}

TEST(SafetensorsModel, Sharded) {
  const fs::path dir = fresh_dir("sharded");
  write_file(dir / "model-00001-of-00002.safetensors",
             build({{"layer.0.w", "BF16", {4, 4}}, {"embd", "F16", {8, 4}}}));
  write_file(dir / "model-00002-of-00002.safetensors",
             build({{"layer.1.w", "BF16", {4, 4}}, {"norm", "F32", {4}}}));
  write_file(dir / "model.safetensors.index.json",
             index_json({{"embd", "model-00001-of-00002.safetensors"},
                         {"layer.0.w", "model-00001-of-00002.safetensors"},
                         {"layer.1.w", "model-00002-of-00002.safetensors"},
                         {"norm", "model-00002-of-00002.safetensors"}}));
  for (const fs::path& p : {dir, dir / "model.safetensors.index.json"}) {
    auto m = SafetensorsModel::open(p.string());
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    EXPECT_TRUE(m->is_sharded());
    EXPECT_EQ(m->index_path(), (dir / "model.safetensors.index.json").string());
    ASSERT_EQ(m->shards().size(), 2u);
    ASSERT_EQ(m->tensors().size(), 4u);
    // Shard by shard, each in offset order.
    EXPECT_EQ(m->tensors()[0].name, "layer.0.w");
    EXPECT_EQ(m->tensors()[1].name, "embd");
    EXPECT_EQ(m->tensors()[2].name, "layer.1.w");
    EXPECT_EQ(m->tensors()[3].name, "norm");
    const SafetensorsTensor* norm = m->find("norm");
    ASSERT_NE(norm, nullptr);
    EXPECT_EQ(norm->dtype, DType::kF32);
    EXPECT_EQ(m->shard_of("norm"), &m->shards()[1]);
    EXPECT_EQ(m->shard_of("embd"), &m->shards()[0]);
    EXPECT_EQ(norm->data, m->shards()[1].find("norm")->data);
    EXPECT_EQ(m->total_bytes(), 32u + 64u + 32u + 16u);
    EXPECT_EQ(m->find("nope"), nullptr);
    EXPECT_EQ(m->shard_of("nope"), nullptr);
  }
}

// A two-shard directory whose index is `index`.
std::string sharded_error(const std::string& test, const std::string& index) {
  const fs::path dir = fresh_dir(test);
  write_file(dir / "a.safetensors", build({{"x", "F32", {2}}, {"y", "F32", {2}}}));
  write_file(dir / "b.safetensors", build({{"z", "F32", {2}}, {"y", "F32", {1}}}));
  write_file(dir / "c.safetensors", build({{"w", "F32", {2}}}));
  write_file(dir / "model.safetensors.index.json", index);
  return dir.string();
}

TEST(SafetensorsModel, ShardedValidation) {
  const auto idx = [](const std::string& dir) { return dir + "/model.safetensors.index.json"; };
  std::string d = sharded_error("missing_shard",
                                index_json({{"x", "a.safetensors"}, {"q", "gone.safetensors"}}));
  auto r = SafetensorsModel::open(d);
  EXPECT_TRUE(fails_with(r, idx(d), {"shard 'gone.safetensors'", "tensor 'q'", "no such file"}));
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);

  d = sharded_error("not_in_shard", index_json({{"w", "c.safetensors"}, {"q", "c.safetensors"}}));
  EXPECT_TRUE(fails_with(SafetensorsModel::open(d), idx(d),
                         {"tensor 'q' is listed in shard 'c.safetensors', which does not"}));

  d = sharded_error(
      "two_shards",
      index_json({{"x", "a.safetensors"}, {"y", "a.safetensors"}, {"z", "b.safetensors"}}));
  EXPECT_TRUE(
      fails_with(SafetensorsModel::open(d), idx(d),
                 {"tensor 'y' appears in two shards", "'a.safetensors'", "'b.safetensors'"}));

  d = sharded_error("unlisted", index_json({{"x", "a.safetensors"}}));
  EXPECT_TRUE(fails_with(SafetensorsModel::open(d), idx(d),
                         {"shard 'a.safetensors' holds tensor 'y'", "does not list"}));

  d = sharded_error("escape", index_json({{"w", "../c.safetensors"}}));
  EXPECT_TRUE(fails_with(SafetensorsModel::open(d), idx(d), {"'../c.safetensors' is not a file"}));

  d = sharded_error("bad_json", R"({"weight_map": {"w": "c.safetensors",}})");
  EXPECT_TRUE(fails_with(SafetensorsModel::open(d), idx(d), {"not valid JSON at byte"}));

  d = sharded_error("dup_key", R"({"weight_map": {"w": "c.safetensors", "w": "a.safetensors"}})");
  EXPECT_TRUE(fails_with(SafetensorsModel::open(d), idx(d), {"duplicate key 'w'"}));

  d = sharded_error("no_map", R"({"metadata": {}})");
  EXPECT_TRUE(fails_with(SafetensorsModel::open(d), idx(d), {"missing 'weight_map'"}));

  d = sharded_error("map_type", R"({"weight_map": {"w": 3}})");
  EXPECT_TRUE(fails_with(SafetensorsModel::open(d), idx(d), {"weight_map['w'] is the integer 3"}));

  d = sharded_error("empty_map", R"({"weight_map": {}})");
  EXPECT_TRUE(fails_with(SafetensorsModel::open(d), idx(d), {"lists no tensors"}));

  // A malformed shard: the message leads with the index, then names the shard and the problem.
  d = sharded_error("bad_shard", index_json({{"w", "c.safetensors"}}));
  write_file(fs::path(d) / "c.safetensors", "short");
  EXPECT_TRUE(fails_with(SafetensorsModel::open(d), idx(d),
                         {"shard 'c.safetensors'", "c.safetensors: file is 5 bytes"}));
}

TEST(SafetensorsModel, MissingPaths) {
  EXPECT_TRUE(fails_with(SafetensorsModel::open("/nonexistent/model"), "/nonexistent/model",
                         {"no such file"}));
  const fs::path dir = fresh_dir("empty_dir");
  EXPECT_TRUE(fails_with(SafetensorsModel::open(dir.string()), dir.string(),
                         {"neither model.safetensors nor model.safetensors.index.json"}));
}

// ------------------------------------------------------------------------- real model (MiniLM)

TEST(SafetensorsRealModel, AllMiniLmL6V2) {
  const auto dir = test::reference_model("all-minilm-l6-v2");
  if (!dir) GTEST_SKIP() << test::missing_model_message("all-minilm-l6-v2");
  auto m = SafetensorsModel::open(*dir);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_FALSE(m->is_sharded());
  EXPECT_EQ(m->tensors().size(), 104u);
  EXPECT_EQ(m->shards()[0].metadata().at("format"), "pt");

  const SafetensorsTensor* emb = m->find("embeddings.word_embeddings.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->dtype, DType::kF32);
  EXPECT_EQ(emb->shape, (std::vector<int64_t>{30522, 384}));
  EXPECT_EQ(emb->nbytes, 30522u * 384u * 4u);
  float first = 0, last = 0;
  std::memcpy(&first, emb->data, 4);
  std::memcpy(&last, emb->data + emb->nbytes - 4, 4);
  EXPECT_FLOAT_EQ(first, -0.019989013671875f);
  EXPECT_FLOAT_EQ(last, 0.004570063669234514f);

  const SafetensorsTensor* ids = m->find("embeddings.position_ids");
  ASSERT_NE(ids, nullptr);
  EXPECT_EQ(ids->dtype, DType::kI64);
  EXPECT_EQ(ids->shape, (std::vector<int64_t>{1, 512}));
  int64_t id511 = 0;
  std::memcpy(&id511, ids->data + size_t{511} * 8, 8);
  EXPECT_EQ(id511, 511);

  const SafetensorsTensor* ffn = m->find("encoder.layer.5.intermediate.dense.weight");
  ASSERT_NE(ffn, nullptr);
  EXPECT_EQ(ffn->shape, (std::vector<int64_t>{1536, 384}));

  auto c = read_hf_config((fs::path(*dir) / "config.json").string());
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->model_type, "bert");
  EXPECT_EQ(c->architectures, (std::vector<std::string>{"BertModel"}));
  EXPECT_EQ(c->hidden_size, 384);
  EXPECT_EQ(c->num_hidden_layers, 6);
  EXPECT_EQ(c->num_attention_heads, 12);
  EXPECT_EQ(c->num_key_value_heads, 12);
  EXPECT_EQ(c->head_dim, 32);
  EXPECT_EQ(c->intermediate_size, 1536);
  EXPECT_EQ(c->vocab_size, 30522);
  EXPECT_EQ(c->max_position_embeddings, 512);
  EXPECT_DOUBLE_EQ(c->norm_eps, 1e-12);
  EXPECT_EQ(emb->shape[0], c->vocab_size);
  EXPECT_EQ(emb->shape[1], c->hidden_size);
}

}  // namespace
}  // namespace rinfer
