// Image decoding and preprocessing against PIL and torchvision (fixtures and expected outputs by
// tests/tools/gen_image_goldens.py), and the decoders' robustness on truncated, corrupt, empty,
// zero-sized and absurdly sized input (run under ASan+UBSan, which also caps allocations below).
//
// Measured tolerance against PIL/torchvision: none. Decoded pixels, resize/crop outputs and the
// normalized float32 tensors are compared for exact (bitwise) equality.
#include "image/image.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "formats/model_cache.h"
#include "test_util.h"

// Under ASan, allocations over 512 MB are reported as errors (tests/asan_limits.cpp), so the
// readers must check declared sizes against the input before allocating.

namespace rinfer {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

using Bytes = std::vector<uint8_t>;

std::string data_path(const std::string& rel) { return test::test_data_path("image/" + rel); }

Bytes read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "missing fixture " << path << " (run tests/tools/gen_image_goldens.py)";
  return Bytes(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

const json& manifest() {
  static const json m = [] {
    const Bytes b = read_bytes(data_path("manifest.json"));
    return json::parse(b.begin(), b.end());
  }();
  return m;
}

Result<Image> decode(const Bytes& b, const std::string& name = "test.img") {
  return decode_image(std::span<const uint8_t>(b.data(), b.size()), name);
}

uint64_t fnv1a64(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t h = 0xCBF29CE484222325ull;
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001B3ull;
  }
  return h;
}

std::string hex64(uint64_t h) { return fmt::format("{:016x}", h); }

// Exact comparison of two [h, w, 3] images, with a summary of the differences.
void expect_same_pixels(const Image& got, int w, int h, const Bytes& want,
                        const std::string& what) {
  ASSERT_EQ(got.width, w) << what;
  ASSERT_EQ(got.height, h) << what;
  ASSERT_EQ(got.rgb.size(), want.size()) << what;
  size_t differ = 0;
  int max_diff = 0;
  size_t first = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const int d = std::abs(int{got.rgb[i]} - int{want[i]});
    if (d != 0 && differ++ == 0) first = i;
    max_diff = std::max(max_diff, d);
  }
  EXPECT_EQ(differ, 0u) << what << ": " << differ << " of " << want.size()
                        << " values differ, max by " << max_diff << ", first at pixel " << first / 3
                        << " (x " << (first / 3) % static_cast<size_t>(w) << ", y "
                        << (first / 3) / static_cast<size_t>(w) << ")";
}

Image expected_decoded(const std::string& file) {
  for (const json& d : manifest()["decode"]) {
    if (d["file"] == file) {
      Image img;
      img.width = d["width"];
      img.height = d["height"];
      img.rgb = read_bytes(data_path(d["expected"]));
      return img;
    }
  }
  ADD_FAILURE() << "no decode entry for " << file;
  return Image{};
}

std::vector<float> normalized(const Image& img) {
  const json& m = manifest();
  const float mean[3] = {m["mean"][0], m["mean"][1], m["mean"][2]};
  const float stdev[3] = {m["std"][0], m["std"][1], m["std"][2]};
  std::vector<float> out(size_t{3} * static_cast<size_t>(img.width) *
                         static_cast<size_t>(img.height));
  normalize_chw(img, mean, stdev, out.data());
  return out;
}

TEST(ImageDecode, MatchesPil) {
  const json& list = manifest()["decode"];
  ASSERT_GE(list.size(), 14u);
  for (const json& d : list) {
    const std::string file = d["file"];
    SCOPED_TRACE(file + " (" + std::string(d["note"]) + ")");
    Result<Image> img = load_image(data_path(file));
    ASSERT_TRUE(img.ok()) << img.status().to_string();
    expect_same_pixels(*img, d["width"], d["height"], read_bytes(data_path(d["expected"])), file);
  }
}

TEST(ImageOps, MatchPilAndTorchvision) {
  const json& list = manifest()["ops"];
  ASSERT_GE(list.size(), 30u);
  std::map<std::string, Image> sources;
  for (const json& op : list) {
    const std::string source = op["source"];
    const std::string kind = op["op"];
    const std::vector<int> args = op["args"];
    const std::string what = fmt::format("{} {}({})", source, kind, fmt::join(args, ", "));
    SCOPED_TRACE(what);
    if (!sources.contains(source)) sources[source] = expected_decoded(source);
    const Image& in = sources[source];
    if (kind == "pipeline") {
      const Image crop = center_crop(resize_shorter(in, args[0]), args[1], args[1]);
      const std::vector<float> got = normalized(crop);
      const Bytes want = read_bytes(data_path(op["expected"]));
      ASSERT_EQ(want.size(), got.size() * sizeof(float));
      std::vector<float> want_f(got.size());
      std::memcpy(want_f.data(), want.data(), want.size());
      size_t differ = 0;
      double max_diff = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        if (std::memcmp(&got[i], &want_f[i], sizeof(float)) != 0) ++differ;
        max_diff = std::max(max_diff, std::abs(double{got[i]} - double{want_f[i]}));
      }
      EXPECT_EQ(differ, 0u) << differ << " values differ, max by " << max_diff;
      continue;
    }
    Image got;
    if (kind == "resize") got = resize_bilinear(in, args[0], args[1]);
    if (kind == "resize_shorter") got = resize_shorter(in, args[0]);
    if (kind == "center_crop") got = center_crop(in, args[0], args[1]);
    const std::vector<int> shape = op["shape"];
    expect_same_pixels(got, shape[1], shape[0], read_bytes(data_path(op["expected"])), what);
  }
}

// The top byte of each splitmix64 output from `seed` (tests/tools/gen_image_goldens.py).
Bytes splitmix_bytes(uint64_t seed, size_t n) {
  Bytes out(n);
  uint64_t state = seed;
  for (size_t i = 0; i < n; ++i) {
    state += 0x9E3779B97F4A7C15ull;
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    out[i] = static_cast<uint8_t>(z >> 56);
  }
  return out;
}

TEST(ImageOps, RandomSizesMatchPil) {
  const json& list = manifest()["random_ops"];
  ASSERT_GE(list.size(), 200u);
  int failures = 0;
  for (const json& c : list) {
    Image in;
    in.width = c["width"];
    in.height = c["height"];
    in.rgb = splitmix_bytes(
        c["seed"], size_t{3} * static_cast<size_t>(in.width) * static_cast<size_t>(in.height));
    const std::string kind = c["op"];
    const std::vector<int> args = c["args"];
    Image got;
    if (kind == "resize") got = resize_bilinear(in, args[0], args[1]);
    if (kind == "resize_shorter") got = resize_shorter(in, args[0]);
    if (kind == "center_crop") got = center_crop(in, args[0], args[1]);
    const bool ok = got.width == c["out"][0] && got.height == c["out"][1] &&
                    hex64(fnv1a64(got.rgb.data(), got.rgb.size())) == c["fnv1a64"];
    if (!ok && failures++ < 10) {
      ADD_FAILURE() << in.width << "x" << in.height << " " << kind << "("
                    << fmt::format("{}", fmt::join(args, ", ")) << "): got " << got.width << "x"
                    << got.height << ", want " << c["out"][0] << "x" << c["out"][1]
                    << " (or the pixels differ)";
    }
  }
  EXPECT_EQ(failures, 0);
}

TEST(ImageOps, EmptyAndDegenerateSizes) {
  const Image in = expected_decoded("rgb.png");
  EXPECT_EQ(resize_bilinear(in, 0, 5).rgb.size(), 0u);
  EXPECT_EQ(resize_bilinear(in, 5, -1).width, 0);
  EXPECT_EQ(resize_bilinear(Image{}, 5, 5).width, 0);
  EXPECT_EQ(resize_shorter(in, 0).width, 0);
  EXPECT_EQ(center_crop(in, 0, 3).width, 0);
  // Same size: a copy.
  const Image same = resize_bilinear(in, in.width, in.height);
  EXPECT_EQ(same.rgb, in.rgb);
  // A crop of an empty image is all padding.
  const Image pad = center_crop(Image{}, 3, 2);
  EXPECT_EQ(pad.rgb, Bytes(18, 0));
}

// ------------------------------------------------------------------------------------------
// Bad input.

void expect_error(const Result<Image>& r, StatusCode code, const std::string& name,
                  const std::string& needle) {
  ASSERT_FALSE(r.ok()) << "decoded a " << r->width << "x" << r->height << " image";
  EXPECT_EQ(r.status().code(), code) << r.status().to_string();
  EXPECT_NE(r.status().message().find(name), std::string::npos) << r.status().to_string();
  EXPECT_NE(r.status().message().find(needle), std::string::npos)
      << "expected '" << needle << "' in: " << r.status().to_string();
}

TEST(ImageDecode, PatchedHeadersAndNonImages) {
  for (const json& b : manifest()["bad"]) {
    const std::string file = b["file"];
    SCOPED_TRACE(file);
    const std::string path = data_path(file);
    Result<Image> r = load_image(path);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(status_code_name(r.status().code()), std::string(b["code"]))
        << r.status().to_string();
    EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status().to_string();
    EXPECT_NE(r.status().message().find(std::string(b["message"])), std::string::npos)
        << r.status().to_string();
  }
}

TEST(ImageDecode, EmptyInput) {
  expect_error(decode(Bytes{}, "empty.png"), StatusCode::kDataLoss, "empty.png", "empty file");
  expect_error(decode(Bytes{0xFF}, "one.jpg"), StatusCode::kInvalidArgument, "one.jpg",
               "not a JPEG or PNG");
  expect_error(decode(Bytes{0xFF, 0xD8, 0xFF}, "soi.jpg"), StatusCode::kDataLoss, "soi.jpg",
               "JPEG");
  const Bytes sig = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  expect_error(decode(sig, "sig.png"), StatusCode::kDataLoss, "sig.png", "truncated PNG");
}

TEST(ImageDecode, MissingFiles) {
  Result<Image> r = load_image(data_path("no_such_image.png"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("no_such_image.png"), std::string::npos);
  Result<Image> d = load_image(data_path("ops"));
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument) << d.status().to_string();
}

// The offset of the first scan's entropy-coded data (after the SOS header).
size_t jpeg_scan_start(const Bytes& b) {
  size_t i = 2;
  while (i + 4 <= b.size()) {
    const uint8_t marker = b[i + 1];
    const size_t len = (size_t{b[i + 2]} << 8) | b[i + 3];
    if (marker == 0xDA) return i + 2 + len;
    i += 2 + len;
  }
  return 0;
}

TEST(ImageDecode, TruncatedJpeg) {
  for (const std::string file : {"q90_420.jpg", "q90_444.jpg", "progressive.jpg", "gray.jpg"}) {
    SCOPED_TRACE(file);
    const Bytes full = read_bytes(data_path(file));
    const size_t scan = jpeg_scan_start(full);
    ASSERT_GT(scan, 0u);
    // In the headers, just into the scan, mid-scan, and without the end marker.
    const std::vector<std::pair<size_t, std::string>> cuts = {
        {10, "JPEG"},
        {scan - 3, "JPEG"},
        {scan + 5, "truncated JPEG"},
        {(scan + full.size()) / 2, "truncated JPEG"},
        {full.size() - 2, "truncated JPEG"},
        {full.size() - 1, "truncated JPEG"}};
    for (const auto& [n, needle] : cuts) {
      SCOPED_TRACE(n);
      expect_error(decode(Bytes(full.begin(), full.begin() + static_cast<ptrdiff_t>(n)), file),
                   StatusCode::kDataLoss, file, needle);
    }
  }
}

TEST(ImageDecode, TruncatedPng) {
  for (const std::string file : {"rgb.png", "interlaced.png", "palette.png"}) {
    SCOPED_TRACE(file);
    const Bytes full = read_bytes(data_path(file));
    for (size_t n :
         {size_t{9}, size_t{20}, size_t{40}, full.size() / 2, full.size() - 12, full.size() - 1}) {
      SCOPED_TRACE(n);
      expect_error(decode(Bytes(full.begin(), full.begin() + static_cast<ptrdiff_t>(n)), file),
                   StatusCode::kDataLoss, file, "PNG");
    }
    // Cut inside the image data: named as a truncation.
    expect_error(
        decode(Bytes(full.begin(), full.begin() + static_cast<ptrdiff_t>(full.size() / 2)), file),
        StatusCode::kDataLoss, file, "truncated PNG");
  }
}

size_t find_chunk(const Bytes& b, const char* type) {
  for (size_t i = 8; i + 8 <= b.size();) {
    const size_t len =
        (size_t{b[i]} << 24) | (size_t{b[i + 1]} << 16) | (size_t{b[i + 2]} << 8) | b[i + 3];
    if (std::memcmp(&b[i + 4], type, 4) == 0) return i;
    i += 12 + len;
  }
  return 0;
}

TEST(ImageDecode, PngCrcErrors) {
  const Bytes full = read_bytes(data_path("rgb.png"));
  const size_t idat = find_chunk(full, "IDAT");
  ASSERT_GT(idat, 0u);
  for (size_t at : {idat + 8, idat + 40, idat + 4 /* the type */}) {
    SCOPED_TRACE(at);
    Bytes b = full;
    b[at] ^= 0x10;
    Result<Image> r = decode(b, "crc.png");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << r.status().to_string();
  }
  Bytes b = full;
  b[idat + 40] ^= 0x10;
  expect_error(decode(b, "crc.png"), StatusCode::kDataLoss, "crc.png", "CRC");
  // The CRC field itself.
  Bytes c = full;
  const size_t iend = find_chunk(full, "IEND");
  c[iend + 8] ^= 0x01;
  expect_error(decode(c, "iend.png"), StatusCode::kDataLoss, "iend.png", "CRC");
}

// ------------------------------------------------------------------------------------------
// Fuzzing: every truncation fails cleanly; random byte flips never crash, and what decodes is
// self-consistent.

void expect_consistent(const Result<Image>& r) {
  if (!r.ok()) {
    EXPECT_FALSE(r.status().message().empty());
    return;
  }
  EXPECT_GT(r->width, 0);
  EXPECT_GT(r->height, 0);
  EXPECT_LE(int64_t{r->width} * r->height, kMaxImagePixels);
  EXPECT_EQ(r->rgb.size(),
            size_t{3} * static_cast<size_t>(r->width) * static_cast<size_t>(r->height));
}

TEST(ImageFuzz, EveryTruncationFails) {
  for (const std::string file : {"rgb.png", "interlaced.png", "q90_420.jpg", "progressive.jpg"}) {
    SCOPED_TRACE(file);
    const Bytes full = read_bytes(data_path(file));
    ASSERT_TRUE(decode(full).ok());
    for (size_t n = 0; n < full.size(); ++n) {
      Result<Image> r = decode(Bytes(full.begin(), full.begin() + static_cast<ptrdiff_t>(n)));
      ASSERT_FALSE(r.ok()) << "a truncation to " << n << " of " << full.size() << " bytes decoded";
    }
  }
}

TEST(ImageFuzz, RandomByteFlips) {
  std::mt19937_64 rng(20250611);
  for (const std::string file :
       {"rgb.png", "palette.png", "q90_420.jpg", "q90_444.jpg", "progressive.jpg"}) {
    SCOPED_TRACE(file);
    const Bytes full = read_bytes(data_path(file));
    int decoded = 0;
    for (int iter = 0; iter < 1500; ++iter) {
      Bytes b = full;
      const int flips = 1 + static_cast<int>(rng() % 4);
      for (int k = 0; k < flips; ++k) {
        // Mostly in the first 200 bytes (the headers), where a flip matters most.
        const size_t span = (iter % 2 == 0) ? std::min<size_t>(b.size(), 200) : b.size();
        b[rng() % span] ^= static_cast<uint8_t>(1u << (rng() % 8));
      }
      Result<Image> r = decode(b);
      expect_consistent(r);
      decoded += r.ok() ? 1 : 0;
    }
    RecordProperty(file + "_decoded", decoded);
  }
}

// ------------------------------------------------------------------------------------------
// Real photos (scikit-image's chelsea.png and coffee.png): torchvision's Resize(256) +
// CenterCrop(224) and the ImageNet-normalized tensor, when the photos are in the cache.

// scripts/fetch-models.sh photos puts them there.
std::string photo_dir() { return (fs::path(model_cache_dir()) / "photos").string(); }

void check_photo(const std::string& name) {
  const std::string path = photo_dir() + "/" + name;
  if (!fs::exists(path)) {
    GTEST_SKIP() << path << " not present (copy skimage/data/" << name
                 << " from a scikit-image install there)";
  }
  const json& want = manifest()["photos"][name];
  Result<Image> img = load_image(path);
  ASSERT_TRUE(img.ok()) << img.status().to_string();
  EXPECT_EQ(img->width, want["width"]);
  EXPECT_EQ(img->height, want["height"]);
  EXPECT_EQ(hex64(fnv1a64(img->rgb.data(), img->rgb.size())), want["decoded_fnv1a64"]);
  const Image crop = center_crop(resize_shorter(*img, 256), 224, 224);
  ASSERT_EQ(crop.width, 224);
  ASSERT_EQ(crop.height, 224);
  for (const json& s : want["samples"]) {
    const size_t i = (size_t{s[0]} * 224 + size_t{s[1]}) * 3;
    EXPECT_EQ(crop.rgb[i], s[2]) << "y " << s[0] << " x " << s[1];
    EXPECT_EQ(crop.rgb[i + 1], s[3]) << "y " << s[0] << " x " << s[1];
    EXPECT_EQ(crop.rgb[i + 2], s[4]) << "y " << s[0] << " x " << s[1];
  }
  EXPECT_EQ(hex64(fnv1a64(crop.rgb.data(), crop.rgb.size())), want["crop_fnv1a64"]);
  const std::vector<float> t = normalized(crop);  // [3, 224, 224]
  EXPECT_EQ(hex64(fnv1a64(t.data(), t.size() * sizeof(float))), want["tensor_fnv1a64"]);
}

TEST(ImagePhotos, Chelsea) { check_photo("chelsea.png"); }
TEST(ImagePhotos, Coffee) { check_photo("coffee.png"); }

}  // namespace
}  // namespace rinfer
