#include "formats/torch_checkpoint.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "formats/model_cache.h"
#include "formats/pickle.h"
#include "test_util.h"

namespace rinfer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::string_literals;

std::string fixture_path(const std::string& name) { return test::test_data_path("torch/" + name); }

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

Result<TorchCheckpoint> parse_bytes(std::string bytes, const std::string& name = "t.pt",
                                    const TorchReadOptions& options = {}) {
  return TorchCheckpoint::parse(MappedFile::from_bytes(name, std::move(bytes)), options);
}

const json& expected() {
  static const json j = json::parse(read_bytes(fixture_path("expected.json")));
  return j;
}

// Element i of a tensor as a double (every dtype here converts exactly).
double element(const TorchTensor& t, uint64_t i) {
  const uint8_t* p = t.data + i * dtype_traits(t.dtype).block_bytes;
  auto load = [p](auto v) {
    std::memcpy(&v, p, sizeof(v));
    return v;
  };
  switch (t.dtype) {
    case DType::kF32: return load(float{});
    case DType::kF64: return load(double{});
    case DType::kF16: return f16_to_f32(load(uint16_t{}));
    case DType::kBF16: return bf16_to_f32(load(uint16_t{}));
    case DType::kI64: return static_cast<double>(load(int64_t{}));
    case DType::kI32: return load(int32_t{});
    case DType::kI16: return load(int16_t{});
    case DType::kI8: return load(int8_t{});
    case DType::kU8:
    case DType::kBool: return load(uint8_t{});
    case DType::kF8E4M3: return f8e4m3_to_f32(load(uint8_t{}));
    case DType::kF8E5M2: return f8e5m2_to_f32(load(uint8_t{}));
    default: return NAN;
  }
}

bool inside_mapping(const TorchCheckpoint& c, const TorchTensor& t) {
  const uint8_t* b = c.file()->data();
  return t.data >= b && t.data + t.nbytes <= b + c.file()->size();
}

// Checks every tensor of `file` against expected.json: order, name, dtype, shape, values.
void check_fixture(const std::string& file) {
  SCOPED_TRACE(file);
  const json& e = expected().at(file);
  Result<TorchCheckpoint> c = TorchCheckpoint::open(fixture_path(file));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(torch_format_name(c->format()), e.at("format").get<std::string>());
  const json& tensors = e.at("tensors");
  ASSERT_EQ(c->tensors().size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const json& x = tensors[i];
    const TorchTensor& t = c->tensors()[i];
    SCOPED_TRACE(t.name);
    EXPECT_EQ(t.name, x.at("name").get<std::string>());
    EXPECT_EQ(c->find(t.name), &t);
    EXPECT_EQ(dtype_name(t.dtype), x.at("dtype").get<std::string>());
    EXPECT_EQ(t.shape, x.at("shape").get<std::vector<int64_t>>());
    const auto& values = x.at("values");
    ASSERT_EQ(t.numel, values.size());
    EXPECT_EQ(t.nbytes, t.numel * static_cast<uint64_t>(dtype_traits(t.dtype).block_bytes));
    EXPECT_EQ(t.copied, x.at("copied").get<bool>());
    if (!t.copied) {
      EXPECT_TRUE(t.numel == 0 || inside_mapping(*c, t));
    }
    for (uint64_t k = 0; k < t.numel; ++k) {
      ASSERT_EQ(element(t, k), values[k].get<double>()) << "element " << k;
    }
  }
}

TEST(TorchCheckpoint, FixturesMatchTorch) {
  for (const auto& [file, unused] : expected().items()) check_fixture(file);
}

TEST(TorchCheckpoint, SharedStorageAndOffsets) {
  for (const char* file : {"sd_zip.pt", "sd_legacy.pt"}) {
    SCOPED_TRACE(file);
    Result<TorchCheckpoint> c = TorchCheckpoint::open(fixture_path(file));
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    const TorchTensor* a = c->find("shared.a");  // base[2:8]
    const TorchTensor* b = c->find("shared.b");  // base[10:18]
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(b->data - a->data, 8 * 4);  // one storage: 8 floats apart
    const TorchTensor* s = c->find("steps");
    ASSERT_NE(s, nullptr);
    EXPECT_TRUE(s->shape.empty());
    EXPECT_EQ(s->numel, 1u);
    EXPECT_EQ(c->find("nope"), nullptr);
    EXPECT_EQ(c->find("empty")->numel, 0u);
  }
}

TEST(TorchCheckpoint, PermutedTensorsCopiedOrRefused) {
  TorchReadOptions strict;
  strict.copy_permuted = false;
  Result<TorchCheckpoint> c = TorchCheckpoint::open(fixture_path("permuted.pt"), strict);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(c.status().message().find("tensor 'transposed': stored in another dimension order "
                                      "(size [4, 3], stride [1, 4]), not row-major"),
            std::string::npos)
      << c.status().message();
  // The default copies them (values checked against torch in FixturesMatchTorch).
  c = TorchCheckpoint::open(fixture_path("permuted.pt"));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_TRUE(c->find("conv_hwio")->copied);
  EXPECT_FALSE(c->find("plain")->copied);
  // Copies live as long as the checkpoint (or a copy of it).
  TorchCheckpoint copy = *c;
  const TorchTensor* t = copy.find("transposed");
  c = TorchCheckpoint::open(fixture_path("sd_zip.pt"));
  EXPECT_EQ(element(*t, 1), expected()["permuted.pt"]["tensors"][0]["values"][1].get<double>());
}

TEST(TorchCheckpoint, StridedTensorRefused) {
  Result<TorchCheckpoint> c = TorchCheckpoint::open(fixture_path("strided.pt"));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("tensor 'every_other': not dense (size [4], stride [2])"),
            std::string::npos)
      << c.status().message();
}

TEST(TorchCheckpoint, UnsupportedDtypeNamed) {
  Result<TorchCheckpoint> c = TorchCheckpoint::open(fixture_path("uint16.pt"));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(c.status().message().find("tensor 'u16': dtype torch.uint16 is not supported"),
            std::string::npos)
      << c.status().message();
}

TEST(TorchCheckpoint, Sniff) {
  for (const char* f : {"sd_zip.pt", "sd_legacy.pt", "module_legacy.pt", "sd_proto4.pt"}) {
    const std::string b = read_bytes(fixture_path(f));
    EXPECT_TRUE(TorchCheckpoint::sniff({reinterpret_cast<const uint8_t*>(b.data()), b.size()}))
        << f;
  }
  for (std::string b : {std::string("GGUF\x03\0\0\0", 8), std::string("\x80\x02}q\0.", 6),
                        std::string("hello"), std::string()}) {
    EXPECT_FALSE(TorchCheckpoint::sniff({reinterpret_cast<const uint8_t*>(b.data()), b.size()}));
  }
}

TEST(TorchCheckpoint, NotACheckpoint) {
  Result<TorchCheckpoint> c = parse_bytes("hello world");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message().rfind("t.pt: not a PyTorch checkpoint", 0), 0u)
      << c.status().message();
  c = TorchCheckpoint::open("/nonexistent/x.pt");
  EXPECT_FALSE(c.ok());
}

// ------------------------------------------------------------------- hand-made legacy streams

std::string le32(uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); }
std::string le64(uint64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); }
std::string uni(const std::string& s) { return "X" + le32(static_cast<uint32_t>(s.size())) + s; }
std::string bin_int(int32_t v) { return "J" + le32(static_cast<uint32_t>(v)); }
std::string global(const std::string& module, const std::string& name) {
  return "c" + module + "\n" + name + "\n";
}
std::string ints_tuple(const std::vector<int64_t>& v) {
  std::string s = "(";
  for (int64_t x : v) s += bin_int(static_cast<int32_t>(x));
  return s + "t";
}

// Magic number, protocol version and system info pickles.
std::string legacy_prefix() {
  return std::string("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.", 15) +
         "\x80\x02M\xe9\x03." + "\x80\x02}" + uni("little_endian") + "\x88s.";
}

struct TensorDef {
  std::string name = "w";
  std::string storage_type = "FloatStorage";
  int numel = 4;  // of the storage
  int offset = 0;
  std::vector<int64_t> shape = {2, 2};
  std::vector<int64_t> stride = {2, 1};
};

// A legacy checkpoint of one OrderedDict holding `t` on storage "k", whose data are floats
// 1, 2, 3, ...
std::string legacy_file(const TensorDef& t) {
  std::string s = legacy_prefix() + "\x80\x02" + global("collections", "OrderedDict") + ")R(";
  s += uni(t.name) + global("torch._utils", "_rebuild_tensor_v2") + "((" + uni("storage") +
       global("torch", t.storage_type) + uni("k") + uni("cpu") + bin_int(t.numel) + "NtQ";
  s += bin_int(t.offset) + ints_tuple(t.shape) + ints_tuple(t.stride) + "\x89" +
       global("collections", "OrderedDict") + ")RtRu.";
  s += std::string("\x80\x02](") + uni("k") + "e.";
  s += le64(static_cast<uint64_t>(t.numel));
  for (int i = 0; i < t.numel; ++i) {
    const float v = static_cast<float>(i + 1);
    s += std::string(reinterpret_cast<const char*>(&v), 4);
  }
  return s;
}

// A legacy stream whose state dict pickle is `pickle`.
std::string with_pickle(const std::string& pickle) { return legacy_prefix() + pickle; }

void expect_error(const std::string& bytes, const std::string& what) {
  Result<TorchCheckpoint> c = parse_bytes(bytes);
  ASSERT_FALSE(c.ok()) << "parsed; expected: " << what;
  EXPECT_EQ(c.status().message().rfind("t.pt: ", 0), 0u) << c.status().message();
  EXPECT_NE(c.status().message().find(what), std::string::npos)
      << "message: " << c.status().message() << "\nexpected to contain: " << what;
}

TEST(TorchCheckpoint, HandMadeLegacyParses) {
  TensorDef def;
  def.offset = 1;
  def.numel = 5;
  Result<TorchCheckpoint> c = parse_bytes(legacy_file(def));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  ASSERT_EQ(c->tensors().size(), 1u);
  EXPECT_EQ(c->format(), TorchFormat::kLegacy);
  EXPECT_EQ(element(c->tensors()[0], 0), 2.0);
  EXPECT_EQ(element(c->tensors()[0], 3), 5.0);
}

TEST(TorchCheckpoint, TensorOutsideStorageRefused) {
  TensorDef def;
  def.offset = 1;  // elements 1..4 of a 4-element storage
  expect_error(legacy_file(def),
               "tensor 'w': size [2, 2], stride [2, 1], storage offset 1: elements up to 5 lie "
               "outside its storage 'k' of 4 elements");
  def.offset = 100;
  expect_error(legacy_file(def), "storage offset 100: elements up to 104 lie outside");
  def.offset = 0;
  def.shape = {2, 3};
  def.stride = {3, 1};
  expect_error(legacy_file(def), "elements up to 6 lie outside its storage 'k' of 4 elements");
  def.shape = {2, 2};
  def.stride = {1, 1};  // overlapping
  expect_error(legacy_file(def), "tensor 'w': not dense (size [2, 2], stride [1, 1])");
}

TEST(TorchCheckpoint, MaliciousGlobalsRefused) {
  expect_error(with_pickle("\x80\x02" + global("posix", "system") + uni("ls") + "\x85R."),
               "t.pt: state dict: offset " + std::to_string(legacy_prefix().size() + 2) +
                   ": global 'posix.system' is not allowed");
  // STACK_GLOBAL (protocol 4).
  expect_error(with_pickle("\x80\x04\x8c\x08"
                           "builtins\x8c\x04"
                           "eval\x93."),
               "global 'builtins.eval' is not allowed");
  expect_error(with_pickle("\x80\x02" + global("__builtin__", "getattr") + "."),
               "global '__builtin__.getattr' is not allowed");
  expect_error(with_pickle("\x80\x02" + global("torch.nn.modules.linear", "Linear") + ")R."),
               "global 'torch.nn.modules.linear.Linear' is not allowed");
  expect_error(with_pickle("\x80\x02" + global("torch", "FloatStorage") + ")R."),
               "REDUCE of 'torch.FloatStorage' is not allowed");
  expect_error(with_pickle("\x80\x02" + uni("os.system") + ")R."),
               "REDUCE of the string 'os.system': only allowed globals can be called");
  expect_error(with_pickle("\x80\x02" + global("collections", "OrderedDict") + uni("x") + "\x85R."),
               "REDUCE of 'collections.OrderedDict' with arguments");
}

TEST(TorchCheckpoint, PickleBombsRefused) {
  // 100,000 nested lists: ]]]...]aaa...a
  expect_error(with_pickle("\x80\x02" + std::string(100000, ']') + std::string(99999, 'a') + "."),
               "values nested deeper than 64: refused");
  // 100,000 nested tuples through MARKs.
  expect_error(with_pickle("\x80\x02" + std::string(100000, '(') + std::string(100000, 't') + "."),
               "more than 64 open MARKs: refused");
  // 100,000 nested one-tuples.
  expect_error(with_pickle("\x80\x02N" + std::string(100000, '\x85') + "."),
               "values nested deeper than 64");
  // A list holding itself, appended again and again.
  std::string self = "\x80\x02]q\x00"s;
  for (int i = 0; i < 100; ++i)
    self +=
        "h\x00"
        "a"s;
  expect_error(with_pickle(self + "."), "values nested deeper than 64");
}

TEST(TorchCheckpoint, MalformedPicklesRefused) {
  expect_error(with_pickle("\x80\x02X" + le32(1000000) + "abc"),
               "BINUNICODE length 1000000 runs past the end of the pickle (3 bytes left)");
  expect_error(with_pickle("\x80\x02\x8d" + le64(~uint64_t{0}) + "ab"),
               "BINUNICODE8 length 18446744073709551615 runs past the end");
  expect_error(with_pickle("\x80\x02T" + le32(0xfffffff0u) + "."),
               "BINSTRING length -16 is negative");
  expect_error(with_pickle("\x80\x02h\x05."), "memo key 5 was never stored");
  expect_error(with_pickle("\x80\x02}"), "the pickle ends without a STOP opcode");
  expect_error(with_pickle("\x80\x02}}."), "STOP with 2 values on the stack");
  expect_error(with_pickle("\x80\x02t."), "no MARK to pop to");
  expect_error(with_pickle("\x80\x02R."), "stack underflow");
  expect_error(with_pickle("\x80\x02](u."), "SETITEMS on a list of 0, expected a dict");
  expect_error(with_pickle("\x80\x02}(Nu."), "SETITEMS with an odd number (1) of values");
  expect_error(with_pickle("\x80\x02"
                           "cos\nsys"),
               "GLOBAL name runs past the end of the pickle");
  expect_error(with_pickle("\x80\x02"
                           "c" +
                           std::string(600, 'a')),
               "GLOBAL module is longer than 512");
  expect_error(with_pickle("\x80\x02I1\n."), "opcode INT (0x49) is not allowed");
  expect_error(with_pickle("\x80\x02\xff."), "unknown opcode 0xff");
  expect_error(with_pickle("\x80\x06}."), "pickle protocol 6");
  expect_error(with_pickle("\x80\x02]."),
               "the pickled object is a list of 0, expected a state dict");
  expect_error(with_pickle("\x80\x02}" + uni("epoch") + "K\x03s."),
               "tensor 'epoch': value is the int 3, expected a tensor");
  expect_error(with_pickle("\x80\x02}K\x01K\x03s."), "state dict key is the int 1");
}

TEST(TorchCheckpoint, LegacyStreamChecks) {
  TensorDef def;
  std::string good = legacy_file(def);
  expect_error(good + "x", "1 unexpected bytes after the last storage");
  expect_error(good.substr(0, good.size() - 1), "run past the end of the file");
  std::string bad_magic = good;
  bad_magic[5] = 0;
  expect_error(bad_magic, "not a PyTorch checkpoint: the first pickle is a big int");
  def.storage_type = "ComplexFloatStorage";
  expect_error(legacy_file(def),
               "tensor 'w': storage type torch.ComplexFloatStorage is not supported");
  def.storage_type = "UntypedStorage";
  expect_error(legacy_file(def), "tensor 'w': an untyped storage without a dtype");
}

// ------------------------------------------------------------------------- zip-level damage

// Offset of the central directory entry named `name` in a zip's bytes.
size_t central_entry(const std::string& zip, const std::string& name) {
  const std::string sig("PK\x01\x02", 4);
  for (size_t at = zip.find(sig); at != std::string::npos; at = zip.find(sig, at + 1)) {
    uint16_t n = 0;
    std::memcpy(&n, zip.data() + at + 28, 2);
    if (zip.compare(at + 46, n, name) == 0) return at;
  }
  return std::string::npos;
}

TEST(TorchCheckpoint, ZipDamageRefused) {
  const std::string zip = read_bytes(fixture_path("sd_zip.pt"));
  const size_t cd = central_entry(zip, "sd_zip/data/3");
  ASSERT_NE(cd, std::string::npos);
  uint32_t local = 0;
  std::memcpy(&local, zip.data() + cd + 42, 4);

  std::string b = zip;  // deflate, in the central directory and the local header
  b[cd + 10] = 8;
  b[local + 8] = 8;
  Result<TorchCheckpoint> c = parse_bytes(b);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(),
            "t.pt: entry 'sd_zip/data/3' is compressed (method 8: deflate); PyTorch checkpoints "
            "store entries uncompressed");

  b = zip;
  const uint32_t far = 0x7fffffff;
  std::memcpy(b.data() + cd + 42, &far, 4);
  expect_error(b, "entry 'sd_zip/data/3': local header offset 2147483647 is outside");

  b = zip;  // the entry's size now runs into the central directory
  const uint32_t big = 100000;
  std::memcpy(b.data() + cd + 20, &big, 4);
  std::memcpy(b.data() + cd + 24, &big, 4);
  expect_error(b, "entry 'sd_zip/data/3': 100000 bytes at offset");

  b = zip;  // another size: no longer what the storage needs
  const uint32_t four = 4;
  std::memcpy(b.data() + cd + 20, &four, 4);
  std::memcpy(b.data() + cd + 24, &four, 4);
  expect_error(b,
               "entry 'sd_zip/data/3' is 4 bytes, but storage '3' of 6 BFloat16Storage needs 12");

  b = zip;  // encrypted
  b[cd + 8] = static_cast<char>(b[cd + 8] | 1);
  expect_error(b, "entry 'sd_zip/data/3' is encrypted");

  b = zip;  // the name in the central directory no longer matches any storage key
  b[cd + 46 + 12] = 'x';
  expect_error(b, "entry 'sd_zip/data/x': local header at offset");

  expect_error(zip.substr(0, zip.size() - 1), "no zip end of central directory record");
  expect_error(zip + "x", "no zip end of central directory record");
}

TEST(TorchCheckpoint, ZipMaliciousPickleRefused) {
  // Replace the start of data.pkl (stored, so its bytes are in the file) by a global.
  std::string b = read_bytes(fixture_path("sd_proto4.pt"));
  const size_t at = b.find("\x80\x04\x95");
  ASSERT_NE(at, std::string::npos);
  const std::string evil = "\x80\x02" + global("os", "system") + ".";
  b.replace(at, evil.size(), evil);
  expect_error(b, "t.pt: sd_proto4/data.pkl: offset 2: global 'os.system' is not allowed");
}

// -------------------------------------------------------------------------------- rinfer info

TEST(TorchCheckpoint, InfoCommand) {
  const std::string path = fixture_path("sd_zip.pt");
  auto r = test::run_command(std::string(RINFER_BINARY) + " info '" + path + "' --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["format"], "pytorch (zip)");
  EXPECT_EQ(j["tensors"]["count"], 16);
  EXPECT_EQ(j["dtypes"]["f32"]["tensors"], 6);
  r = test::run_command(std::string(RINFER_BINARY) + " info '" + fixture_path("sd_legacy.pt") +
                        "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("pytorch (legacy)"), std::string::npos) << r.out;
  r = test::run_command(std::string(RINFER_BINARY) + " info '" + fixture_path("strided.pt") + "'");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("tensor 'every_other': not dense"), std::string::npos) << r.err;
}

// ------------------------------------------------- the reference checkpoints, when cached

std::optional<std::string> find_in_cache(const std::string& file) {
  std::error_code ec;
  const fs::path dir = model_cache_dir();
  if (!fs::is_directory(dir, ec)) return std::nullopt;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    if (it->path().filename() == file) return it->path().string();
  }
  return std::nullopt;
}

struct Expect {
  const char* name;
  std::vector<int64_t> shape;
  double sum;
  double first;
};

void check_real(const std::string& file, TorchFormat format, size_t n_tensors, uint64_t n_params,
                const std::vector<Expect>& expect) {
  auto path = find_in_cache(file);
  if (!path) GTEST_SKIP() << file << " not in " << model_cache_dir();
  Result<TorchCheckpoint> c = TorchCheckpoint::open(*path);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->format(), format);
  EXPECT_EQ(c->tensors().size(), n_tensors);
  uint64_t params = 0;
  for (const TorchTensor& t : c->tensors()) params += t.numel;
  EXPECT_EQ(params, n_params);
  for (const Expect& e : expect) {
    const TorchTensor* t = c->find(e.name);
    ASSERT_NE(t, nullptr) << e.name;
    EXPECT_EQ(t->shape, e.shape) << e.name;
    double sum = 0;
    for (uint64_t i = 0; i < t->numel; ++i) sum += element(*t, i);
    EXPECT_NEAR(sum, e.sum, 1e-9 * std::max(1.0, std::abs(e.sum)) * t->numel) << e.name;
    EXPECT_EQ(element(*t, 0), e.first) << e.name;
  }
}

TEST(TorchCheckpoint, MobileNetV2) {
  check_real("mobilenet-v2.pth", TorchFormat::kLegacy, 314, 3539036,
             {{"features.0.0.weight", {32, 3, 3, 3}, -0.7730716340520303, 0.013185339979827404},
              {"classifier.1.bias", {1000}, -0.00010184831626247615, 0.04718802496790886},
              {"features.0.1.num_batches_tracked", {}, 1431430.0, 1431430.0}});
}

TEST(TorchCheckpoint, EfficientNetLite0) {
  // 50 of its conv weights are stored in [kh, kw, cin, cout] order: copied to row-major.
  check_real(
      "efficientnet-lite0.pth", TorchFormat::kLegacy, 296, 4694073,
      {{"_conv_stem.weight", {32, 3, 3, 3}, -26.811376610887237, -1.1103360652923584},
       {"_blocks.0._depthwise_conv.weight", {32, 1, 3, 3}, 5.221442859619856, -0.16969285905361176},
       {"_fc.weight", {1000, 1280}, -470.63256730128705, -0.04561043530702591}});
}

// ------------------------------------------------------------------------ the pickle reader

TEST(Pickle, ValuesAndSharing) {
  // {'a': [1, -2, 3.5, None, True, b'xy', 'a'], 'b': <the same list>, 'c': (big int,)}
  std::string p = "\x80\x02}q\x00("s + uni("a") + "q\x01]q\x02(K\x01J" +
                  le32(static_cast<uint32_t>(-2)) + "G\x40\x0c\x00\x00\x00\x00\x00\x00"s + "N\x88" +
                  "C\x02xy" + "h\x01" + "e" + uni("b") + "h\x02" + uni("c") + "\x8a\x09" +
                  std::string(9, '\x01') + "\x85" + "u.";
  const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(p.data()), p.size());
  Result<Pickle> r = read_pickle(bytes, 0, {});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const Pickle& k = *r;
  EXPECT_EQ(k.end, p.size());
  const PickleValue& d = k.root_value();
  ASSERT_EQ(d.kind, PickleKind::kDict);
  ASSERT_EQ(d.items.size(), 6u);
  EXPECT_TRUE(k.is_string(d.items[0], "a"));
  EXPECT_EQ(d.items[1], d.items[3]);  // one list, shared
  const PickleValue& list = k.at(d.items[1]);
  ASSERT_EQ(list.items.size(), 7u);
  EXPECT_EQ(k.at(list.items[0]).int_value, 1);
  EXPECT_EQ(k.at(list.items[1]).int_value, -2);
  EXPECT_EQ(k.at(list.items[2]).float_value, 3.5);
  EXPECT_EQ(k.at(list.items[3]).kind, PickleKind::kNone);
  EXPECT_TRUE(k.at(list.items[4]).flag);
  EXPECT_EQ(k.at(list.items[5]).text, "xy");
  EXPECT_EQ(list.items[6], d.items[0]);  // the memoized key string
  const PickleValue& big = k.at(k.at(d.items[5]).items[0]);
  EXPECT_EQ(big.kind, PickleKind::kBigInt);
  EXPECT_EQ(big.text.size(), 9u);
}

TEST(Pickle, Long1SignExtends) {
  for (const auto& [bytes, value] : std::vector<std::pair<std::string, int64_t>>{
           {std::string("\x8a\x00", 2), 0},
           {std::string("\x8a\x01\xff", 3), -1},
           {std::string("\x8a\x02\x00\x80", 4), -32768},
           {std::string("\x8a\x08\xff\xff\xff\xff\xff\xff\xff\x7f", 10), INT64_MAX}}) {
    const std::string p = bytes + ".";
    Result<Pickle> r = read_pickle({reinterpret_cast<const uint8_t*>(p.data()), p.size()}, 0, {});
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->root_value().int_value, value);
  }
}

TEST(Pickle, ValueLimit) {
  std::string p = "(";
  for (int i = 0; i < 50; ++i) p += "N";
  p += "l.";  // LIST is not allowed, but the limit comes first
  PickleLimits limits;
  limits.max_values = 10;
  Result<Pickle> r =
      read_pickle({reinterpret_cast<const uint8_t*>(p.data()), p.size()}, 100, {}, limits);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "offset 111: more than 10 values: refused");
}

}  // namespace
}  // namespace rinfer
