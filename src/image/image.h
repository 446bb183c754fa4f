// Images for the vision samples: decoding (JPEG through libjpeg-turbo, PNG through libpng) into
// 8-bit RGB, and the preprocessing steps a recipe names (resize, center crop, normalization).
//
// Decoding is for untrusted input: a truncated or corrupt file, a PNG with a bad CRC, a zero or
// absurd declared size (over kMaxImagePixels), or bytes that are no image give a Status naming
// the file and the problem, never a crash; nothing is allocated before the declared size is
// checked.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "rinfer/status.h"

namespace rinfer {

// Larger declared images are refused before anything is allocated for them.
inline constexpr int64_t kMaxImagePixels = 64ll * 1024 * 1024;

struct Image {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;  // [height, width, 3], row-major
};

// Decodes JPEG or PNG (chosen by the magic bytes, not the name); grayscale, palette, 16-bit and
// alpha images become 8-bit RGB (alpha dropped, as PIL's convert("RGB") does). `name` is for
// messages.
//   16-bit samples keep their high byte (as PIL does for 16-bit RGB, RGBA and gray+alpha; PIL
//   clips 16-bit grayscale, its I;16 mode, at 255 instead, which is not copied here).
//   JPEG decodes with libjpeg's defaults (ISLOW DCT, fancy upsampling), PIL's settings: the
//   pixels equal Image.open(...).convert("RGB")'s. CMYK/YCCK JPEGs are refused (kUnsupported).
//   Errors: kDataLoss for empty, truncated or corrupt data (a warning of libjpeg about damaged
//   data, a CRC mismatch in any PNG chunk, a missing end, a zero declared size), kOutOfRange for
//   a declared size over kMaxImagePixels, kInvalidArgument for bytes that are no JPEG or PNG.
Result<Image> decode_image(std::span<const uint8_t> bytes, const std::string& name);
// Reads and decodes a file.
Result<Image> load_image(const std::string& path);

// Resizes to out_w x out_h with PIL's bilinear filter with antialiasing (the support widens with
// the downscale factor, as Image.resize(BILINEAR) and torchvision's Resize on PIL images do),
// rounding to 8 bits as PIL does. An empty input or a size below 1 gives an empty Image.
Image resize_bilinear(const Image& in, int out_w, int out_h);
// torchvision's Resize(size) with one int: the shorter side becomes `size`, the other keeps the
// aspect ratio (floor, as torchvision computes it). An empty input or a size below 1 gives an empty
// Image.
Image resize_shorter(const Image& in, int size);
// torchvision's CenterCrop: the crop's top-left corner rounds as torchvision does; a crop larger
// than the image pads with zeros. A size below 1 gives an empty Image.
Image center_crop(const Image& in, int out_w, int out_h);

// (x / 255 - mean[c]) / std[c] for mean/std given on the [0, 1] scale (ImageNet's), written
// channel-first: out is [3, height, width]. The arithmetic is torchvision's ToTensor + Normalize
// in float32 (a division by 255, then by std), so the values are bit-identical to its.
void normalize_chw(const Image& in, const float mean[3], const float stdev[3], float* out);

}  // namespace rinfer
