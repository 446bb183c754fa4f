// GGUF reader and writer: round trips, hand-crafted bad files (one per validation rule), and
// the reference models. Truncation and byte-flip fuzzing live in gguf_fuzz_test.cpp.
#include "formats/gguf.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/mapped_file.h"
#include "formats/gguf_writer.h"
#include "test_util.h"

namespace rinfer {
namespace {

using Value = GgufWriter::Value;

// Hand-crafted GGUF bytes, little-endian.
class GgufBytes {
 public:
  template <typename T>
  GgufBytes& put(T v) {
    s_.append(reinterpret_cast<const char*>(&v), sizeof(v));
    return *this;
  }
  GgufBytes& u8(uint8_t v) { return put(v); }
  GgufBytes& u32(uint32_t v) { return put(v); }
  GgufBytes& u64(uint64_t v) { return put(v); }
  GgufBytes& type(GgufType t) { return u32(static_cast<uint32_t>(t)); }
  GgufBytes& raw(std::string_view b) {
    s_ += b;
    return *this;
  }
  GgufBytes& str(std::string_view b) { return u64(b.size()).raw(b); }
  GgufBytes& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    return raw("GGUF").u32(version).u64(n_tensors).u64(n_kv);
  }
  GgufBytes& kv_u32(std::string_view key, uint32_t v) {
    return str(key).type(GgufType::kU32).u32(v);
  }
  // A tensor info; ne in GGUF order (innermost first).
  GgufBytes& tensor(std::string_view name, const std::vector<int64_t>& ne, uint32_t ggml_type,
                    uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(ne.size()));
    for (int64_t d : ne) put<int64_t>(d);
    return u32(ggml_type).u64(offset);
  }
  GgufBytes& pad(size_t alignment = 32) {
    s_.resize((s_.size() + alignment - 1) / alignment * alignment, '\0');
    return *this;
  }
  GgufBytes& zeros(size_t n) {
    s_.append(n, '\x5a');
    return *this;
  }
  const std::string& bytes() const { return s_; }

 private:
  std::string s_;
};

Result<GgufFile> parse_bytes(std::string bytes, std::string name = "bad.gguf") {
  return GgufFile::parse(MappedFile::from_bytes(std::move(name), std::move(bytes)));
}

// Parsing must fail with a message that starts with the file name and contains `what`.
void expect_error(const GgufBytes& b, std::string_view what,
                  StatusCode code = StatusCode::kDataLoss) {
  Result<GgufFile> r = parse_bytes(b.bytes());
  ASSERT_FALSE(r.ok()) << "expected an error containing: " << what;
  const std::string& m = r.status().message();
  EXPECT_EQ(m.rfind("bad.gguf: ", 0), 0u) << m;
  EXPECT_NE(m.find(what), std::string::npos) << "message: " << m << "\nexpected: " << what;
  EXPECT_EQ(r.status().code(), code) << m;
}

std::string random_data(size_t n, uint64_t seed) {
  std::vector<uint8_t> b = test::random_bytes(n, seed);
  return std::string(b.begin(), b.end());
}

bool points_into(const MappedFile& f, const void* p, size_t n) {
  const auto* q = static_cast<const uint8_t*>(p);
  return q >= f.data() && q + n <= f.data() + f.size();
}

// ---- round trip through the writer ----

struct TensorSpec {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
};

const std::vector<TensorSpec>& tensor_specs() {
  static const std::vector<TensorSpec> specs = {
      {"f32.weight", DType::kF32, {3, 5}},         {"f16.weight", DType::kF16, {2, 64}},
      {"bf16.weight", DType::kBF16, {3, 1, 2, 8}}, {"q4_0.weight", DType::kQ4_0, {4, 64}},
      {"q8_0.weight", DType::kQ8_0, {1, 32}},      {"q4_k.weight", DType::kQ4_K, {2, 256}},
      {"q6_k.weight", DType::kQ6_K, {1, 256}},     {"i32.ids", DType::kI32, {7}},
  };
  return specs;
}

GgufWriter make_full_writer(uint32_t version, uint32_t alignment, std::vector<std::string>* datas) {
  GgufWriter w(version, alignment);
  w.set("general.architecture", Value::string("llama"));
  w.set("t.u8", Value::of<uint8_t>(200));
  w.set("t.i8", Value::of<int8_t>(-100));
  w.set("t.u16", Value::of<uint16_t>(60000));
  w.set("t.i16", Value::of<int16_t>(-30000));
  w.set("t.u32", Value::of<uint32_t>(4000000000u));
  w.set("t.i32", Value::of<int32_t>(-2000000000));
  w.set("t.f32", Value::of<float>(3.25f));
  w.set("t.bool", Value::of<bool>(true));
  w.set("t.u64", Value::of<uint64_t>((uint64_t{1} << 63) + 5));
  w.set("t.i64", Value::of<int64_t>(-(int64_t{1} << 62)));
  w.set("t.f64", Value::of<double>(-1.0 / 3.0));
  w.set("t.str", Value::string("hello"));
  w.set("t.empty", Value::string(""));
  w.set("t.utf8", Value::string("h\xc3\xa9llo \xe4\xb8\x96\xe7\x95\x8c \xf0\x9f\x99\x82"));
  w.set("a.u8", Value::array(std::vector<uint8_t>{1, 2, 255}));
  w.set("a.i8", Value::array(std::vector<int8_t>{-1, 0, 127}));
  w.set("a.u16", Value::array(std::vector<uint16_t>{65535, 7}));
  w.set("a.i16", Value::array(std::vector<int16_t>{-32768, 32767}));
  w.set("a.u32", Value::array(std::vector<uint32_t>{4294967295u, 0, 3}));
  w.set("a.i32", Value::array(std::vector<int32_t>{-5, 6, -7, 8}));
  w.set("a.f32", Value::array(std::vector<float>{1.5f, -2.25f, 1e-30f}));
  w.set("a.bool", Value::array(std::vector<bool>{true, false, true}));
  w.set("a.u64", Value::array(std::vector<uint64_t>{~uint64_t{0}, 1}));
  w.set("a.i64", Value::array(std::vector<int64_t>{std::numeric_limits<int64_t>::min(), 9}));
  w.set("a.f64", Value::array(std::vector<double>{0.1, -1e300}));
  w.set("a.empty", Value::array(std::vector<uint32_t>{}));
  w.set("a.str", Value::strings_array({"a", "", "\xc3\xbc", "\xff\xfe not utf-8"}));
  w.set("a.str_empty", Value::strings_array({}));
  w.set("a.nested",
        Value::arrays({Value::array(std::vector<int32_t>{1, 2}), Value::strings_array({"x"}),
                       Value::arrays({Value::array(std::vector<uint8_t>{7})}), Value::arrays({})}));
  for (size_t i = 0; i < tensor_specs().size(); ++i) {
    const TensorSpec& s = tensor_specs()[i];
    int64_t n = 1;
    for (int64_t d : s.shape) n *= d;
    const auto bytes = static_cast<size_t>(*dtype_row_bytes(s.dtype, static_cast<uint64_t>(n)));
    datas->push_back(random_data(bytes, 100 + i));
    EXPECT_TRUE(w.add_tensor(s.name, s.dtype, s.shape, datas->back()).ok());
  }
  return w;
}

void check_full_file(const GgufFile& f, uint32_t version, uint32_t alignment,
                     const std::vector<std::string>& datas) {
  EXPECT_EQ(f.version(), version);
  EXPECT_EQ(f.alignment(), alignment);
  EXPECT_EQ(f.data_offset() % alignment, 0u);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_uint("t.u8"), 200u);
  EXPECT_EQ(f.get_int("t.i8"), -100);
  EXPECT_EQ(f.get_uint("t.i8"), std::nullopt);  // negative
  EXPECT_EQ(f.get_uint("t.u16"), 60000u);
  EXPECT_EQ(f.get_int("t.i16"), -30000);
  EXPECT_EQ(f.get_uint("t.u32"), 4000000000u);
  EXPECT_EQ(f.get_int("t.i32"), -2000000000);
  EXPECT_EQ(f.get_float("t.f32"), 3.25);
  EXPECT_EQ(f.get_bool("t.bool"), true);
  EXPECT_EQ(f.get_uint("t.u64"), (uint64_t{1} << 63) + 5);
  EXPECT_EQ(f.get_int("t.u64"), std::nullopt);  // past INT64_MAX
  EXPECT_EQ(f.get_int("t.i64"), -(int64_t{1} << 62));
  EXPECT_EQ(f.get_float("t.f64"), -1.0 / 3.0);
  EXPECT_EQ(f.get_string("t.str"), "hello");
  EXPECT_EQ(f.get_string("t.empty"), "");
  EXPECT_EQ(f.get_string("t.utf8"), "h\xc3\xa9llo \xe4\xb8\x96\xe7\x95\x8c \xf0\x9f\x99\x82");
  // Type checks.
  EXPECT_EQ(f.get_string("t.u32"), std::nullopt);
  EXPECT_EQ(f.get_bool("t.u8"), std::nullopt);
  EXPECT_EQ(f.get_uint("t.f32"), std::nullopt);
  EXPECT_EQ(f.get_float("t.u16"), 60000.0);  // integers widen to float
  EXPECT_EQ(f.get_uint("missing"), std::nullopt);
  EXPECT_EQ(f.find("missing"), nullptr);

  EXPECT_EQ(f.find("a.u8")->to_vector<uint8_t>(), (std::vector<uint8_t>{1, 2, 255}));
  EXPECT_EQ(f.find("a.i8")->to_vector<int8_t>(), (std::vector<int8_t>{-1, 0, 127}));
  EXPECT_EQ(f.find("a.u16")->to_vector<uint16_t>(), (std::vector<uint16_t>{65535, 7}));
  EXPECT_EQ(f.find("a.i16")->to_vector<int16_t>(), (std::vector<int16_t>{-32768, 32767}));
  EXPECT_EQ(f.find("a.u32")->to_vector<uint32_t>(), (std::vector<uint32_t>{4294967295u, 0, 3}));
  EXPECT_EQ(f.find("a.i32")->to_vector<int32_t>(), (std::vector<int32_t>{-5, 6, -7, 8}));
  EXPECT_EQ(f.find("a.f32")->to_vector<float>(), (std::vector<float>{1.5f, -2.25f, 1e-30f}));
  EXPECT_EQ(f.find("a.bool")->to_vector<bool>(), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(f.find("a.u64")->to_vector<uint64_t>(), (std::vector<uint64_t>{~uint64_t{0}, 1}));
  EXPECT_EQ(f.find("a.i64")->to_vector<int64_t>(),
            (std::vector<int64_t>{std::numeric_limits<int64_t>::min(), 9}));
  EXPECT_EQ(f.find("a.f64")->to_vector<double>(), (std::vector<double>{0.1, -1e300}));
  EXPECT_EQ(f.find("a.empty")->to_vector<uint32_t>(), std::vector<uint32_t>{});
  EXPECT_EQ(f.find("a.empty")->array_type(), GgufType::kU32);
  // Conversions are checked per element.
  EXPECT_EQ(f.find("a.u32")->to_vector<uint8_t>(), std::nullopt);   // 4294967295 does not fit
  EXPECT_EQ(f.find("a.i32")->to_vector<uint32_t>(), std::nullopt);  // negatives
  EXPECT_EQ(f.find("a.i32")->to_vector<double>(), (std::vector<double>{-5, 6, -7, 8}));
  EXPECT_EQ(f.find("a.f32")->to_vector<int32_t>(), std::nullopt);
  EXPECT_EQ(f.find("a.str")->to_vector<int32_t>(), std::nullopt);
  EXPECT_EQ(f.find("a.i32")->array_element<int32_t>(2), -7);
  EXPECT_EQ(f.find("a.i32")->array_element<int32_t>(4), std::nullopt);
  EXPECT_EQ(f.find("a.i32")->array_bytes().size(), 16u);

  const GgufValue* s = f.find("a.str");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->array_type(), GgufType::kString);
  ASSERT_EQ(s->array_size(), 4u);
  EXPECT_EQ(s->array_strings()[0], "a");
  EXPECT_EQ(s->array_strings()[1], "");
  EXPECT_EQ(s->array_strings()[2], "\xc3\xbc");
  EXPECT_EQ(s->array_strings()[3], "\xff\xfe not utf-8");
  EXPECT_EQ(s->as_string(), std::nullopt);
  EXPECT_EQ(f.find("a.str_empty")->array_size(), 0u);

  const GgufValue* n = f.find("a.nested");
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(n->array_type(), GgufType::kArray);
  ASSERT_EQ(n->array_values().size(), 4u);
  EXPECT_EQ(n->array_values()[0].to_vector<int32_t>(), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(n->array_values()[1].array_strings()[0], "x");
  ASSERT_EQ(n->array_values()[2].array_values().size(), 1u);
  EXPECT_EQ(n->array_values()[2].array_values()[0].to_vector<uint8_t>(), std::vector<uint8_t>{7});
  EXPECT_EQ(n->array_values()[3].array_size(), 0u);
  EXPECT_EQ(n->to_display(8), "[[1, 2], [\"x\"], [[7]], []]");

  // Every key once, in order (general.alignment appended by the writer when not 32).
  EXPECT_EQ(f.metadata().front().first, "general.architecture");
  EXPECT_EQ(f.metadata().size(), alignment == 32 ? 30u : 31u);

  ASSERT_EQ(f.tensors().size(), tensor_specs().size());
  const MappedFile& m = *f.file();
  for (size_t i = 0; i < tensor_specs().size(); ++i) {
    const TensorSpec& spec = tensor_specs()[i];
    const GgufTensorInfo& t = f.tensors()[i];
    EXPECT_EQ(t.name, spec.name);
    EXPECT_EQ(t.dtype, spec.dtype);
    EXPECT_EQ(t.shape, spec.shape);
    EXPECT_EQ(t.ne, std::vector<int64_t>(spec.shape.rbegin(), spec.shape.rend()));
    EXPECT_EQ(t.offset % alignment, 0u);
    ASSERT_EQ(t.nbytes, datas[i].size());
    ASSERT_TRUE(points_into(m, t.data, t.nbytes)) << t.name;
    EXPECT_EQ(t.data, m.data() + f.data_offset() + t.offset);
    EXPECT_EQ(std::memcmp(t.data, datas[i].data(), t.nbytes), 0) << t.name;
    EXPECT_EQ(f.find_tensor(spec.name), &t);
  }
  EXPECT_EQ(f.find_tensor("nope"), nullptr);
}

TEST(GgufRoundTrip, AllTypesVersionsAndAlignments) {
  for (uint32_t version : {2u, 3u}) {
    for (uint32_t alignment : {32u, 64u}) {
      SCOPED_TRACE(testing::Message() << "version " << version << " alignment " << alignment);
      std::vector<std::string> datas;
      GgufWriter w = make_full_writer(version, alignment, &datas);
      Result<std::string> bytes = w.to_bytes();
      ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
      Result<GgufFile> f = parse_bytes(*bytes, "mem.gguf");
      ASSERT_TRUE(f.ok()) << f.status().to_string();
      check_full_file(*f, version, alignment, datas);

      // Through a real file and mmap: the same bytes, and views point into the mapping.
      const std::string path = test::write_temp_file(
          "rt_" + std::to_string(version) + "_" + std::to_string(alignment) + ".gguf", "");
      ASSERT_TRUE(w.write(path).ok());
      std::ifstream in(path, std::ios::binary);
      std::stringstream ss;
      ss << in.rdbuf();
      EXPECT_EQ(ss.str(), *bytes);
      Result<GgufFile> g = GgufFile::open(path);
      ASSERT_TRUE(g.ok()) << g.status().to_string();
      EXPECT_EQ(g->path(), path);
      check_full_file(*g, version, alignment, datas);
      const MappedFile& m = *g->file();
      for (const auto& [key, value] : g->metadata()) {
        EXPECT_TRUE(points_into(m, key.data(), key.size()));
        if (value.as_string()) {
          EXPECT_TRUE(points_into(m, value.as_string()->data(), value.as_string()->size()));
        }
        if (!value.array_bytes().empty()) {
          EXPECT_TRUE(points_into(m, value.array_bytes().data(), value.array_bytes().size()));
        }
        for (std::string_view s : value.array_strings()) {
          EXPECT_TRUE(points_into(m, s.data(), s.size()));
        }
      }
    }
  }
}

TEST(GgufRoundTrip, CopyMetadataThroughWriter) {
  std::vector<std::string> datas;
  GgufWriter w = make_full_writer(3, 64, &datas);
  Result<GgufFile> f = parse_bytes(*w.to_bytes(), "a.gguf");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  GgufWriter copy(3, 64);
  for (const auto& [key, value] : f->metadata()) copy.set(std::string(key), Value::copy_of(value));
  for (const GgufTensorInfo& t : f->tensors()) {
    ASSERT_TRUE(
        copy.add_tensor_view(std::string(t.name), t.dtype, t.shape, {t.data, t.nbytes}).ok());
  }
  Result<std::string> bytes = copy.to_bytes();
  ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
  EXPECT_EQ(*bytes, *w.to_bytes());  // byte-identical
}

TEST(GgufRoundTrip, EmptyFileWithoutTensorsNeedsNoPadding) {
  GgufBytes b;
  b.header(0, 1).kv_u32("a", 1);
  Result<GgufFile> f = parse_bytes(b.bytes());
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->tensors().size(), 0u);
  EXPECT_EQ(f->get_uint("a"), 1u);
  GgufWriter w(2);
  Result<GgufFile> g = parse_bytes(*w.to_bytes());
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_EQ(g->version(), 2u);
  EXPECT_TRUE(g->metadata().empty());
}

TEST(GgufValue, Display) {
  GgufWriter w;
  w.set("s", Value::string("a\"b\\c\nd\x01\xff\xc3\xa9"));
  w.set("f", Value::of<float>(0.5f));
  w.set("b", Value::of<bool>(false));
  w.set("i", Value::of<int32_t>(-3));
  w.set("a", Value::array(std::vector<int32_t>{1, 2, 3, 4, 5}));
  w.set("t", Value::strings_array({"x", "y", "z"}));
  w.set("e", Value::strings_array({}));
  Result<GgufFile> f = parse_bytes(*w.to_bytes());
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->find("s")->to_display(), "\"a\\\"b\\\\c\\nd\\x01\\xff\xc3\xa9\"");
  EXPECT_EQ(f->find("f")->to_display(), "0.5");
  EXPECT_EQ(f->find("b")->to_display(), "false");
  EXPECT_EQ(f->find("i")->to_display(), "-3");
  EXPECT_EQ(f->find("a")->to_display(3), "[1, 2, 3, ... (5 items)]");
  EXPECT_EQ(f->find("a")->to_display(5), "[1, 2, 3, 4, 5]");
  EXPECT_EQ(f->find("a")->to_display(0), "[... (5 items)]");
  EXPECT_EQ(f->find("t")->to_display(2), "[\"x\", \"y\", ... (3 items)]");
  EXPECT_EQ(f->find("e")->to_display(), "[]");
  EXPECT_EQ(f->find("s")->type(), GgufType::kString);
  EXPECT_EQ(gguf_type_name(GgufType::kF64), "f64");
}

TEST(GgufTypes, GgmlTypeMapping) {
  const std::vector<std::pair<uint32_t, DType>> expected = {
      {0, DType::kF32},   {1, DType::kF16},   {2, DType::kQ4_0},  {3, DType::kQ4_1},
      {6, DType::kQ5_0},  {7, DType::kQ5_1},  {8, DType::kQ8_0},  {10, DType::kQ2_K},
      {11, DType::kQ3_K}, {12, DType::kQ4_K}, {13, DType::kQ5_K}, {14, DType::kQ6_K},
      {15, DType::kQ8_K}, {24, DType::kI8},   {25, DType::kI16},  {26, DType::kI32},
      {27, DType::kI64},  {28, DType::kF64},  {30, DType::kBF16}};
  for (const auto& [id, dtype] : expected) {
    EXPECT_EQ(dtype_from_ggml_type(id), dtype) << id;
    EXPECT_EQ(ggml_type_from_dtype(dtype), id) << id;
  }
  for (uint32_t id : {4u, 5u, 9u, 16u, 20u, 23u, 29u, 31u, 34u, 39u, 40u, 1000u}) {
    EXPECT_EQ(dtype_from_ggml_type(id), std::nullopt) << id;
  }
  EXPECT_EQ(ggml_type_from_dtype(DType::kBool), std::nullopt);
  EXPECT_EQ(ggml_type_from_dtype(DType::kF8E4M3), std::nullopt);
}

// ---- writer errors ----

TEST(GgufWriter, RejectsBadInput) {
  GgufWriter w;
  EXPECT_FALSE(w.add_tensor("w", DType::kF32, {2, 3}, std::string(20, 'x')).ok());    // 24 needed
  EXPECT_FALSE(w.add_tensor("w", DType::kQ4_0, {2, 16}, std::string(18, 'x')).ok());  // ragged
  EXPECT_FALSE(w.add_tensor("w", DType::kBool, {4}, std::string(4, 'x')).ok());
  EXPECT_FALSE(w.add_tensor("w", DType::kF32, {}, "").ok());
  EXPECT_FALSE(w.add_tensor("w", DType::kF32, {1, 1, 1, 1, 1}, std::string(4, 'x')).ok());
  EXPECT_FALSE(w.add_tensor("w", DType::kF32, {0}, "").ok());
  EXPECT_FALSE(w.add_tensor("", DType::kF32, {1}, std::string(4, 'x')).ok());
  EXPECT_FALSE(w.add_tensor(std::string(64, 'n'), DType::kF32, {1}, std::string(4, 'x')).ok());
  EXPECT_TRUE(w.add_tensor("w", DType::kF32, {1}, std::string(4, 'x')).ok());
  EXPECT_FALSE(w.add_tensor("w", DType::kF32, {1}, std::string(4, 'x')).ok());  // duplicate
  EXPECT_EQ(w.tensor_count(), 1u);

  EXPECT_FALSE(GgufWriter(1).to_bytes().ok());
  EXPECT_FALSE(GgufWriter(3, 48).to_bytes().ok());
  GgufWriter a(3, 64);
  a.set("general.alignment", Value::of<uint32_t>(32));
  EXPECT_FALSE(a.to_bytes().ok());
  a.set("general.alignment", Value::of<uint32_t>(64));
  EXPECT_TRUE(a.to_bytes().ok());
  GgufWriter e;
  e.set("", Value::of<uint8_t>(1));
  EXPECT_FALSE(e.to_bytes().ok());
  GgufWriter n;
  n.set("k", Value::arrays({Value::of<uint8_t>(1)}));  // element is not an array
  EXPECT_FALSE(n.to_bytes().ok());

  Status s = GgufWriter().write("/nonexistent-dir/x.gguf");
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("/nonexistent-dir/x.gguf"), std::string::npos) << s.message();
}

// ---- hand-crafted bad files: one per validation rule ----

TEST(GgufBad, HeaderRules) {
  expect_error(GgufBytes(), "magic runs past the end of the file");
  expect_error(GgufBytes().raw("GGUX").u32(3).u64(0).u64(0), "bad magic 47 47 55 58");
  expect_error(GgufBytes().raw("GGUF").u32(3).u64(0),
               "metadata kv count runs past the end of the file (offset 16, needs 8 bytes");
  expect_error(GgufBytes().header(0, 0, 1), "GGUF version 1 is not supported",
               StatusCode::kUnsupported);
  expect_error(GgufBytes().header(0, 0, 4), "GGUF version 4 is not supported",
               StatusCode::kUnsupported);
  expect_error(GgufBytes().header(0, 0, 0x03000000), "big-endian", StatusCode::kUnsupported);
  expect_error(GgufBytes().header(0, 1000000).kv_u32("a", 1),
               "metadata kv count 1000000 cannot "
               "fit in the 17 bytes");
  expect_error(GgufBytes().header(~uint64_t{0}, 1).kv_u32("a", 1),
               "tensor count 18446744073709551615 cannot fit");
  expect_error(GgufBytes().header(1, 2).kv_u32("a", 1).kv_u32("b", 1),
               "2 metadata kvs and 1 tensor infos cannot fit");
}

TEST(GgufBad, MetadataRules) {
  // The example from the design: a string array element whose length runs off the end.
  GgufBytes tok;
  tok.header(0, 1).str("tokenizer.ggml.tokens").type(GgufType::kArray).type(GgufType::kString);
  tok.u64(3).str("a").u64(~uint64_t{0}).zeros(20);
  expect_error(tok,
               "bad.gguf: metadata key 'tokenizer.ggml.tokens': array element 1: string length "
               "18446744073709551615 runs past the end of the file (offset 86, file size 106)");

  GgufBytes big;
  big.header(0, 1).str("k").type(GgufType::kArray).type(GgufType::kU32).u64(uint64_t{1} << 62);
  expect_error(big,
               "metadata key 'k': array of 4611686018427387904 u32 elements runs past the "
               "end of the file");
  GgufBytes strs;
  strs.header(0, 1).str("k").type(GgufType::kArray).type(GgufType::kString).u64(3).zeros(23);
  expect_error(strs, "array of 3 string elements runs past the end of the file");
  GgufBytes arrs;
  arrs.header(0, 1).str("k").type(GgufType::kArray).type(GgufType::kArray).u64(2).zeros(23);
  expect_error(arrs, "array of 2 array elements runs past the end of the file");

  // Depth: 8 levels parse, 9 do not.
  for (int depth : {8, 9}) {
    GgufBytes b;
    b.header(0, 1).str("deep").type(GgufType::kArray);
    for (int i = 1; i < depth; ++i) b.type(GgufType::kArray).u64(1);
    b.type(GgufType::kU8).u64(1).u8(5);
    Result<GgufFile> r = parse_bytes(b.bytes());
    if (depth == 8) {
      EXPECT_TRUE(r.ok()) << r.status().to_string();
    } else {
      expect_error(b, "metadata key 'deep': array element 0: array element 0: array element 0");
      expect_error(b, "arrays nested deeper than 8 levels");
    }
  }

  expect_error(GgufBytes().header(0, 1).str("k").u32(13).u32(0),
               "metadata key 'k': unknown "
               "value type 13 (offset 33)");
  expect_error(GgufBytes().header(0, 1).str("k").type(GgufType::kArray).u32(200).u64(0),
               "unknown array element type 200");
  expect_error(GgufBytes().header(0, 1).str("").type(GgufType::kU8).u8(1).zeros(4),
               "metadata entry 0 of 1: empty key (offset 24)");
  expect_error(GgufBytes().header(0, 1).u64(70000).raw("abcdef"),
               "key length 70000 exceeds the limit of 65535 bytes");
  expect_error(GgufBytes().header(0, 1).u64(5000).raw("abcdefghijklmnopq"),
               "key length 5000 runs past the end of the file");
  expect_error(GgufBytes().header(0, 3).kv_u32("a.b", 1).kv_u32("c", 2).kv_u32("a.b", 3),
               "duplicate metadata key 'a.b' (entries 0 and 2");
  expect_error(GgufBytes().header(0, 1).str("k").type(GgufType::kBool).u8(2).zeros(4),
               "metadata key 'k': bool value 2 is not 0 or 1");
  expect_error(GgufBytes()
                   .header(0, 1)
                   .str("k")
                   .type(GgufType::kArray)
                   .type(GgufType::kBool)
                   .u64(3)
                   .u8(1)
                   .u8(7)
                   .u8(0),
               "array element 1: bool value 7 is not 0 or 1");
  expect_error(GgufBytes().header(0, 1).str("k").type(GgufType::kU64).u32(1).u8(0).u8(0),
               "metadata key 'k': u64 value runs past the end of the file");
  expect_error(GgufBytes().header(0, 1).str("k\n\xff").type(GgufType::kString).u64(99).zeros(8),
               "metadata key 'k\\x0a\\xff': string length 99 runs past the end of the file");

  // Invalid UTF-8 is not rejected.
  GgufBytes utf;
  utf.header(0, 1).str("\xc0\xaf").type(GgufType::kString).str("\xed\xa0\x80\xff");
  Result<GgufFile> r = parse_bytes(utf.bytes());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->get_string("\xc0\xaf"), "\xed\xa0\x80\xff");
}

TEST(GgufBad, AlignmentRules) {
  for (uint32_t a : {0u, 48u, 3u}) {
    expect_error(
        GgufBytes().header(0, 1).kv_u32("general.alignment", a),
        "metadata key 'general.alignment' is " + std::to_string(a) + ", not a power of two");
  }
  expect_error(GgufBytes().header(0, 1).str("general.alignment").type(GgufType::kU64).u64(32),
               "'general.alignment' has type u64, expected u32");
  GgufBytes ok;
  ok.header(1, 1).kv_u32("general.alignment", 8).tensor("w", {2}, 0, 0).pad(8).zeros(8);
  Result<GgufFile> r = parse_bytes(ok.bytes());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->alignment(), 8u);
  EXPECT_EQ(r->data_offset() % 8, 0u);
}

// A file with one f32 tensor of `ne` at `offset` and `data_bytes` bytes of data.
GgufBytes one_tensor(std::string_view name, const std::vector<int64_t>& ne, uint32_t type = 0,
                     uint64_t offset = 0, size_t data_bytes = 64) {
  GgufBytes b;
  b.header(1, 0).tensor(name, ne, type, offset).pad().zeros(data_bytes);
  return b;
}

TEST(GgufBad, TensorInfoRules) {
  expect_error(one_tensor("", {4}), "tensor info 0 of 1: empty tensor name");
  expect_error(one_tensor(std::string(64, 'n'), {4}),
               "is 64 bytes, longer than GGML's limit of 63");
  EXPECT_TRUE(parse_bytes(one_tensor(std::string(63, 'n'), {4}).bytes()).ok());
  expect_error(one_tensor("w", {}), "tensor 'w': n_dims 0 is not in 1..4");
  expect_error(one_tensor("w", {1, 1, 1, 1, 1}), "tensor 'w': n_dims 5 is not in 1..4");
  expect_error(one_tensor("w", {4, 0}), "tensor 'w': ne[1] is 0, must be positive");
  expect_error(one_tensor("w", {4, -3}), "tensor 'w': ne[1] is -3, must be positive");
  expect_error(one_tensor("w", {int64_t{1} << 32, int64_t{1} << 32}),
               "tensor 'w': element count of ne 4294967296, 4294967296 overflows 64 bits");
  expect_error(one_tensor("w", {int64_t{1} << 31, int64_t{1} << 31}, 28),
               "byte size of 4611686018427387904 f64 elements overflows 64 bits");
  expect_error(one_tensor("w", {33, 2}, 2),
               "tensor 'w': row length ne[0] = 33 is not a multiple of the q4_0 block size 32");
  expect_error(one_tensor("w", {255}, 12), "not a multiple of the q4_k block size 256");
  expect_error(one_tensor("attn_q.weight", {32}, 20),
               "tensor 'attn_q.weight': ggml type 20 (iq4_nl) is not supported",
               StatusCode::kUnsupported);
  expect_error(one_tensor("w", {32}, 4), "ggml type 4 (q4_2 (removed)) is not supported",
               StatusCode::kUnsupported);
  expect_error(one_tensor("w", {32}, 9), "ggml type 9 (q8_1)", StatusCode::kUnsupported);
  expect_error(one_tensor("w", {32}, 1000), "ggml type 1000 (unknown)", StatusCode::kUnsupported);
  GgufBytes dup;
  dup.header(2, 0).tensor("w", {4}, 0, 0).tensor("w", {4}, 0, 32).pad().zeros(64);
  expect_error(dup, "duplicate tensor name 'w' (tensor infos 0 and 1");
}

TEST(GgufBad, TensorDataRules) {
  expect_error(one_tensor("w", {4}, 0, 16),
               "tensor 'w': data offset 16 is not a multiple of "
               "the alignment 32");
  expect_error(one_tensor("w", {17}, 0, 0, 64),
               "tensor 'w': data [0, +68) runs past the end of "
               "the file (data section at offset 64, file size "
               "128)");
  expect_error(one_tensor("w", {4}, 0, 64, 64), "data [64, +16) runs past the end of the file");
  expect_error(one_tensor("w", {4}, 0, ~uint64_t{31}, 64), "runs past the end of the file");
  GgufBytes overlap;
  overlap.header(2, 0).tensor("a", {16}, 0, 32).tensor("b", {16}, 0, 64).pad().zeros(160);
  expect_error(overlap, "tensors 'a' [32, 96) and 'b' [64, 128) overlap");
  GgufBytes same;
  same.header(2, 0).tensor("a", {4}, 0, 0).tensor("b", {4}, 0, 0).pad().zeros(64);
  expect_error(same, "overlap");
  // The tensor infos end where the file does: the padding is missing.
  GgufBytes nopad;
  nopad.header(1, 0).tensor("w", {4}, 0, 0);
  expect_error(nopad, "padding after the tensor infos runs past the end of the file");
  // Touching ranges and out-of-order offsets are fine.
  GgufBytes fine;
  fine.header(2, 0).tensor("a", {8}, 0, 32).tensor("b", {8}, 0, 0).pad().zeros(64);
  Result<GgufFile> r = parse_bytes(fine.bytes());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->find_tensor("a")->data, r->find_tensor("b")->data + 32);
}

TEST(GgufBad, RequireHelpersNameFileAndKey) {
  GgufBytes b;
  b.header(0, 2).kv_u32("n", 7).str("s").type(GgufType::kString).str("x");
  Result<GgufFile> f = parse_bytes(b.bytes(), "m.gguf");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(*f->require_uint("n"), 7u);
  EXPECT_EQ(*f->require_string("s"), "x");
  EXPECT_EQ(f->require_uint("missing").status().message(),
            "m.gguf: missing metadata key 'missing'");
  EXPECT_EQ(f->require_uint("missing").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(f->require_float("s").status().message(),
            "m.gguf: metadata key 's' is string \"x\", expected a number");
}

TEST(GgufOpen, MissingFile) {
  Result<GgufFile> r = GgufFile::open("/nonexistent/model.gguf");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("/nonexistent/model.gguf"), std::string::npos);
}

// ---- reference models ----

Result<GgufFile> open_timed(const std::string& path) {
  const auto t0 = std::chrono::steady_clock::now();
  Result<GgufFile> f = GgufFile::open(path);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("parsed %s in %.1f ms\n", path.c_str(), ms);
  return f;
}

void check_tensors_in_file(const GgufFile& f) {
  uint64_t total = 0;
  for (const GgufTensorInfo& t : f.tensors()) {
    EXPECT_TRUE(points_into(*f.file(), t.data, t.nbytes)) << t.name;
    total += t.nbytes;
  }
  EXPECT_LE(total, f.file()->size());
}

TEST(GgufModel, SmolLM2) {
  const std::string name = "smollm2-135m-instruct-q4_1";
  std::optional<std::string> path = test::reference_model(name);
  if (!path) GTEST_SKIP() << test::missing_model_message(name);
  Result<GgufFile> f = open_timed(*path);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->tensors().size(), 272u);
  EXPECT_EQ(f->get_string("general.architecture"), "llama");
  EXPECT_EQ(f->get_uint("llama.block_count"), 30u);
  EXPECT_EQ(f->get_uint("llama.embedding_length"), 576u);
  EXPECT_EQ(f->get_uint("llama.attention.head_count"), 9u);
  EXPECT_EQ(f->get_uint("llama.attention.head_count_kv"), 3u);
  EXPECT_NEAR(*f->get_float("llama.attention.layer_norm_rms_epsilon"), 1e-5, 1e-12);
  const GgufValue* tokens = f->find("tokenizer.ggml.tokens");
  ASSERT_NE(tokens, nullptr);
  EXPECT_EQ(tokens->array_type(), GgufType::kString);
  EXPECT_EQ(tokens->array_size(), 49152u);
  EXPECT_EQ(tokens->array_strings().size(), 49152u);
  EXPECT_EQ(f->find("tokenizer.ggml.token_type")->to_vector<int32_t>()->size(), 49152u);
  const GgufTensorInfo* emb = f->find_tensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->dtype, DType::kQ8_0);
  EXPECT_EQ(emb->shape, (std::vector<int64_t>{49152, 576}));
  EXPECT_EQ(emb->ne, (std::vector<int64_t>{576, 49152}));
  EXPECT_EQ(emb->nbytes, 49152u * 576u / 32u * 34u);
  check_tensors_in_file(*f);
}

TEST(GgufModel, Gemma3) {
  const std::string name = "gemma3-270m-q4_k_m";
  std::optional<std::string> path = test::reference_model(name);
  if (!path) GTEST_SKIP() << test::missing_model_message(name);
  Result<GgufFile> f = open_timed(*path);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->tensors().size(), 236u);
  EXPECT_EQ(f->get_uint("gemma3.block_count"), 18u);
  EXPECT_EQ(f->get_uint("gemma3.embedding_length"), 640u);
  const GgufValue* tokens = f->find("tokenizer.ggml.tokens");
  ASSERT_NE(tokens, nullptr);
  EXPECT_EQ(tokens->array_strings().size(), 262144u);
  EXPECT_EQ(f->find("tokenizer.ggml.scores")->to_vector<float>()->size(), 262144u);
  const GgufTensorInfo* emb = f->find_tensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->shape, (std::vector<int64_t>{262144, 640}));
  check_tensors_in_file(*f);
}

}  // namespace
}  // namespace rinfer
