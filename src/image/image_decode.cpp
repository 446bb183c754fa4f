// JPEG (libjpeg-turbo) and PNG (libpng) decoding into 8-bit RGB, for untrusted bytes.
//
// Both libraries report errors by longjmp. Each decode runs in a plain function over a POD job
// (no C++ object with a destructor lives in the frame that calls setjmp, so a longjmp skips no
// destructor); the output buffer is a std::vector owned by the caller and only reached through a
// pointer. Warnings that mean damaged data (libjpeg fills a truncated scan with gray and warns)
// are errors too: a truncated or corrupt file never decodes silently.
#include <png.h>
#include <setjmp.h>
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>

// jpeglib.h needs size_t and FILE declared first.
#include <jerror.h>
#include <jpeglib.h>

#include "core/error.h"
#include "core/input_file.h"
#include "image/image.h"

namespace rinfer {
namespace {

// Image files larger than this are refused by load_image before they are read.
constexpr uint64_t kMaxImageFileBytes = uint64_t{1} << 30;
// A progressive JPEG may hold any number of scans, each a pass over the whole coefficient
// buffer; a crafted file with thousands of tiny scans would take minutes. Real encoders write
// about ten.
constexpr int kMaxJpegScans = 256;

enum class Failure {
  kNone,
  kLibrary,      // the library's own error (message in the job)
  kCorrupt,      // a warning about damaged data, turned into an error
  kTruncated,    // the data ended early
  kSize,         // declared size zero or over kMaxImagePixels
  kUnsupported,  // CMYK JPEG, an odd layout
  kNoMemory,     // the output buffer could not be allocated
};

constexpr size_t kMessageBytes = 256;

// Resizes the caller's buffer without letting an exception into C frames.
bool grow_buffer(std::vector<uint8_t>* v, size_t n) noexcept {
  try {
    v->resize(n);
  } catch (...) {
    return false;
  }
  return true;
}

bool size_ok(int64_t w, int64_t h) { return w > 0 && h > 0 && w * h <= kMaxImagePixels; }

// ------------------------------------------------------------------------------------------
// JPEG

struct JpegJob {
  // In.
  const uint8_t* data;
  size_t size;
  std::vector<uint8_t>* out;  // [height, width, 3] on success
  // Out.
  int width;
  int height;
  int64_t declared_width;
  int64_t declared_height;
  Failure failure;
  char message[kMessageBytes];
  // libjpeg state.
  jpeg_decompress_struct cinfo;
  jpeg_error_mgr err;
  jpeg_progress_mgr progress;
  jmp_buf jump;
};

JpegJob* job_of(j_common_ptr c) { return static_cast<JpegJob*>(c->client_data); }

[[noreturn]] void jpeg_fail(j_common_ptr c, Failure f) {
  JpegJob* job = job_of(c);
  if (job->failure == Failure::kNone) {
    job->failure = f;
    char buf[JMSG_LENGTH_MAX];
    (*c->err->format_message)(c, buf);
    std::snprintf(job->message, sizeof(job->message), "%s", buf);
  }
  longjmp(job->jump, 1);
}

[[noreturn]] void on_jpeg_error(j_common_ptr c) {
  // libjpeg says "Empty JPEG image" for a zero size in SOF (and for a bad component count).
  if (c->err->msg_code == JERR_EMPTY_IMAGE && c->is_decompressor) {
    auto* d = reinterpret_cast<j_decompress_ptr>(c);
    if (d->image_width == 0 || d->image_height == 0) {
      job_of(c)->declared_width = d->image_width;
      job_of(c)->declared_height = d->image_height;
      jpeg_fail(c, Failure::kSize);
    }
  }
  jpeg_fail(c, Failure::kLibrary);
}

// Warnings (level -1) about damaged data abort the decode; the few about odd but harmless header
// fields do not. Trace messages (level >= 0) are dropped.
void on_jpeg_message(j_common_ptr c, int level) {
  if (level >= 0) return;
  const int code = c->err->msg_code;
  if (code == JWRN_JFIF_MAJOR || code == JWRN_ADOBE_XFORM || code == JWRN_BOGUS_ICC) return;
  jpeg_fail(c, code == JWRN_JPEG_EOF ? Failure::kTruncated : Failure::kCorrupt);
}

void on_jpeg_output(j_common_ptr) {}

void on_jpeg_progress(j_common_ptr c) {
  if (!c->is_decompressor) return;
  auto* d = reinterpret_cast<j_decompress_ptr>(c);
  if (d->input_scan_number > kMaxJpegScans) {
    JpegJob* job = job_of(c);
    if (job->failure == Failure::kNone) {
      job->failure = Failure::kCorrupt;
      std::snprintf(job->message, sizeof(job->message), "more than %d scans", kMaxJpegScans);
    }
    longjmp(job->jump, 1);
  }
}

// Decodes job->data into *job->out. Plain data only in this frame (see the file comment).
void decode_jpeg_pod(JpegJob* job) {
  j_decompress_ptr cinfo = &job->cinfo;
  cinfo->err = jpeg_std_error(&job->err);
  job->err.error_exit = on_jpeg_error;
  job->err.emit_message = on_jpeg_message;
  job->err.output_message = on_jpeg_output;
  cinfo->client_data = job;
  if (setjmp(job->jump) != 0) {
    jpeg_destroy_decompress(cinfo);
    return;
  }
  jpeg_create_decompress(cinfo);
  job->progress.progress_monitor = on_jpeg_progress;
  cinfo->progress = &job->progress;
  jpeg_mem_src(cinfo, job->data, static_cast<unsigned long>(job->size));
  if (jpeg_read_header(cinfo, TRUE) != JPEG_HEADER_OK) {
    job->failure = Failure::kCorrupt;
    std::snprintf(job->message, sizeof(job->message), "tables only, no image");
    jpeg_destroy_decompress(cinfo);
    return;
  }
  job->declared_width = cinfo->image_width;
  job->declared_height = cinfo->image_height;
  // Checked before jpeg_start_decompress, which allocates (for a progressive file, the whole
  // coefficient image).
  if (!size_ok(job->declared_width, job->declared_height)) {
    job->failure = Failure::kSize;
    jpeg_destroy_decompress(cinfo);
    return;
  }
  if (cinfo->jpeg_color_space == JCS_CMYK || cinfo->jpeg_color_space == JCS_YCCK ||
      (cinfo->num_components != 1 && cinfo->num_components != 3)) {
    job->failure = Failure::kUnsupported;
    const bool cmyk = cinfo->jpeg_color_space == JCS_CMYK || cinfo->jpeg_color_space == JCS_YCCK;
    std::snprintf(job->message, sizeof(job->message),
                  "%s JPEG (%d components) is not supported, only grayscale and color (YCbCr, RGB)",
                  cmyk ? "a CMYK" : "this kind of", cinfo->num_components);
    jpeg_destroy_decompress(cinfo);
    return;
  }
  // PIL's settings (libjpeg's defaults), so the pixels are the same as Image.open's.
  cinfo->out_color_space = JCS_RGB;
  cinfo->dct_method = JDCT_ISLOW;
  cinfo->do_fancy_upsampling = TRUE;
  cinfo->do_block_smoothing = TRUE;
  cinfo->scale_num = 1;
  cinfo->scale_denom = 1;
  jpeg_start_decompress(cinfo);
  const size_t w = cinfo->output_width;
  const size_t h = cinfo->output_height;
  if (cinfo->output_components != 3 || !size_ok(static_cast<int64_t>(w), static_cast<int64_t>(h))) {
    job->failure = Failure::kUnsupported;
    std::snprintf(job->message, sizeof(job->message), "JPEG: unexpected output layout");
    jpeg_destroy_decompress(cinfo);
    return;
  }
  if (!grow_buffer(job->out, w * h * 3)) {
    job->failure = Failure::kNoMemory;
    jpeg_destroy_decompress(cinfo);
    return;
  }
  uint8_t* pixels = job->out->data();
  while (cinfo->output_scanline < h) {
    JSAMPROW rows[16];
    const size_t first = cinfo->output_scanline;
    const size_t n = std::min<size_t>(16, h - first);
    for (size_t i = 0; i < n; ++i) rows[i] = pixels + (first + i) * w * 3;
    if (jpeg_read_scanlines(cinfo, rows, static_cast<JDIMENSION>(n)) == 0) {
      job->failure = Failure::kTruncated;
      jpeg_destroy_decompress(cinfo);
      return;
    }
  }
  jpeg_finish_decompress(cinfo);  // reads up to EOI: a missing end is a truncation too
  job->width = static_cast<int>(w);
  job->height = static_cast<int>(h);
  jpeg_destroy_decompress(cinfo);
}

// ------------------------------------------------------------------------------------------
// PNG

struct PngJob {
  // In.
  const uint8_t* data;
  size_t size;
  size_t pos;
  std::vector<uint8_t>* out;  // [height, width, channels] on success (channels 1..4)
  // Out.
  int width;
  int height;
  int channels;
  int64_t declared_width;
  int64_t declared_height;
  Failure failure;
  char message[kMessageBytes];
  // libpng state.
  png_structp png;
  png_infop info;
  png_bytep* rows;  // malloc'd row pointers
};

[[noreturn]] void on_png_error(png_structp png, png_const_charp msg) {
  auto* job = static_cast<PngJob*>(png_get_error_ptr(png));
  if (job->failure == Failure::kNone) {
    job->failure = Failure::kLibrary;
    std::snprintf(job->message, sizeof(job->message), "%s", msg != nullptr ? msg : "error");
  }
  png_longjmp(png, 1);
}

void on_png_warning(png_structp, png_const_charp) {}

void on_png_read(png_structp png, png_bytep dst, size_t n) {
  auto* job = static_cast<PngJob*>(png_get_io_ptr(png));
  if (n > job->size - job->pos) {
    job->failure = Failure::kTruncated;
    png_error(png, "truncated");
  }
  std::memcpy(dst, job->data + job->pos, n);
  job->pos += n;
}

void png_finish(PngJob* job) {
  png_destroy_read_struct(&job->png, &job->info, nullptr);
  std::free(job->rows);
  job->rows = nullptr;
}

// Decodes job->data into *job->out (8-bit, job->channels per pixel). Plain data only in this
// frame (see the file comment).
void decode_png_pod(PngJob* job) {
  job->png = png_create_read_struct(PNG_LIBPNG_VER_STRING, job, on_png_error, on_png_warning);
  if (job->png == nullptr) {
    job->failure = Failure::kNoMemory;
    return;
  }
  job->info = png_create_info_struct(job->png);
  if (job->info == nullptr) {
    job->failure = Failure::kNoMemory;
    png_finish(job);
    return;
  }
  if (setjmp(png_jmpbuf(job->png)) != 0) {
    png_finish(job);
    return;
  }
  png_structp png = job->png;
  png_infop info = job->info;
  png_set_read_fn(png, job, on_png_read);
  // A CRC mismatch in any chunk, critical or ancillary, is an error.
  png_set_crc_action(png, PNG_CRC_ERROR_QUIT, PNG_CRC_ERROR_QUIT);
  png_read_info(png, info);
  png_uint_32 w = 0, h = 0;
  int bit_depth = 0, color_type = 0, interlace = 0;
  png_get_IHDR(png, info, &w, &h, &bit_depth, &color_type, &interlace, nullptr, nullptr);
  job->declared_width = w;
  job->declared_height = h;
  if (!size_ok(job->declared_width, job->declared_height)) {
    job->failure = Failure::kSize;
    png_finish(job);
    return;
  }
  // 16 bits: the high byte (PIL's unpackers for RGB;16B, RGBA;16B, LA;16B).
  if (bit_depth == 16) png_set_strip_16(png);
  if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color_type == PNG_COLOR_TYPE_GRAY && bit_depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  const size_t channels = png_get_channels(png, info);
  const size_t row_bytes = png_get_rowbytes(png, info);
  if (channels < 1 || channels > 4 || png_get_bit_depth(png, info) != 8 ||
      row_bytes != size_t{w} * channels) {
    job->failure = Failure::kUnsupported;
    std::snprintf(job->message, sizeof(job->message), "PNG: unexpected layout after expansion");
    png_finish(job);
    return;
  }
  // Room for the RGB result too: the caller converts in place.
  if (!grow_buffer(job->out, size_t{w} * h * std::max<size_t>(channels, 3))) {
    job->failure = Failure::kNoMemory;
    png_finish(job);
    return;
  }
  job->rows = static_cast<png_bytep*>(std::malloc(sizeof(png_bytep) * h));
  if (job->rows == nullptr) {
    job->failure = Failure::kNoMemory;
    png_finish(job);
    return;
  }
  for (size_t y = 0; y < h; ++y) job->rows[y] = job->out->data() + y * row_bytes;
  png_read_image(png, job->rows);
  png_read_end(png, nullptr);  // the chunks after the image: their CRCs, IEND
  job->width = static_cast<int>(w);
  job->height = static_cast<int>(h);
  job->channels = static_cast<int>(channels);
  png_finish(job);
}

// Turns [n, channels] 8-bit pixels at the front of `buf` into [n, 3] RGB in place (gray is
// replicated, alpha dropped), then trims the buffer.
void to_rgb_in_place(std::vector<uint8_t>& buf, size_t n, int channels) {
  uint8_t* p = buf.data();
  if (channels == 1 || channels == 2) {  // expanding: back to front
    for (size_t i = n; i-- > 0;) {
      const uint8_t g = p[i * static_cast<size_t>(channels)];
      p[i * 3 + 0] = g;
      p[i * 3 + 1] = g;
      p[i * 3 + 2] = g;
    }
  } else if (channels == 4) {  // shrinking: front to back
    for (size_t i = 0; i < n; ++i) {
      p[i * 3 + 0] = p[i * 4 + 0];
      p[i * 3 + 1] = p[i * 4 + 1];
      p[i * 3 + 2] = p[i * 4 + 2];
    }
  }
  buf.resize(n * 3);
}

Status failure_status(Failure f, const char* message, const std::string& name, const char* kind,
                      int64_t w, int64_t h) {
  switch (f) {
    case Failure::kNone: return ok_status();
    case Failure::kLibrary: return data_loss("{}: bad {}: {}", name, kind, message);
    case Failure::kCorrupt: return data_loss("{}: corrupt {}: {}", name, kind, message);
    case Failure::kTruncated:
      return data_loss("{}: truncated {} (the data ends before the image is complete)", name, kind);
    case Failure::kSize:
      if (w <= 0 || h <= 0)
        return data_loss("{}: {} declares an empty image ({}x{})", name, kind, w, h);
      return out_of_range("{}: {} declares {}x{} pixels, over the limit of {} pixels", name, kind,
                          w, h, kMaxImagePixels);
    case Failure::kUnsupported: return unsupported("{}: {}", name, message);
    case Failure::kNoMemory: return out_of_memory("{}: no memory for a {}x{} {}", name, w, h, kind);
  }
  return internal_error("{}: unknown decode failure", name);
}

Result<Image> decode_jpeg(std::span<const uint8_t> bytes, const std::string& name) {
  Image img;
  JpegJob job{};
  job.data = bytes.data();
  job.size = bytes.size();
  job.out = &img.rgb;
  decode_jpeg_pod(&job);
  if (job.failure != Failure::kNone) {
    return failure_status(job.failure, job.message, name, "JPEG", job.declared_width,
                          job.declared_height);
  }
  img.width = job.width;
  img.height = job.height;
  return img;
}

uint32_t read_be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

// Checks the CRC of every complete chunk up to IEND before libpng reads any: libpng inflates a
// chunk's data as it reads it and only then checks its CRC, so a damaged IDAT would otherwise be
// reported as whatever zlib makes of it. A chunk cut short is left to libpng (a truncation).
Status check_png_crcs(std::span<const uint8_t> bytes, const std::string& name) {
  size_t pos = 8;
  while (pos + 12 <= bytes.size()) {
    const uint64_t len = read_be32(bytes.data() + pos);
    if (len > bytes.size() - pos - 12) break;
    const uint8_t* type = bytes.data() + pos + 4;
    const uint32_t want = read_be32(type + 4 + len);
    const uint32_t got =
        static_cast<uint32_t>(crc32(crc32(0L, Z_NULL, 0), type, static_cast<uInt>(4 + len)));
    std::string type_name;
    for (int i = 0; i < 4; ++i) {
      const char c = static_cast<char>(type[i]);
      type_name += std::isalpha(static_cast<unsigned char>(c)) ? std::string(1, c)
                                                               : fmt::format("\\x{:02x}", type[i]);
    }
    if (got != want) {
      return data_loss("{}: bad PNG: CRC error in chunk '{}' at byte {}", name, type_name, pos);
    }
    if (std::memcmp(type, "IEND", 4) == 0) break;
    pos += 12 + len;
  }
  return ok_status();
}

Result<Image> decode_png(std::span<const uint8_t> bytes, const std::string& name) {
  RINFER_RETURN_IF_ERROR(check_png_crcs(bytes, name));
  // The size in IHDR (it must come first) is checked here, before libpng sees it: libpng's own
  // check only says "Invalid IHDR data".
  if (bytes.size() >= 24 && std::memcmp(bytes.data() + 12, "IHDR", 4) == 0) {
    const int64_t w = read_be32(bytes.data() + 16);
    const int64_t h = read_be32(bytes.data() + 20);
    if (!size_ok(w, h)) return failure_status(Failure::kSize, "", name, "PNG", w, h);
  }
  Image img;
  PngJob job{};
  job.data = bytes.data();
  job.size = bytes.size();
  job.out = &img.rgb;
  decode_png_pod(&job);
  if (job.failure != Failure::kNone) {
    return failure_status(job.failure, job.message, name, "PNG", job.declared_width,
                          job.declared_height);
  }
  img.width = job.width;
  img.height = job.height;
  to_rgb_in_place(img.rgb, static_cast<size_t>(img.width) * static_cast<size_t>(img.height),
                  job.channels);
  return img;
}

}  // namespace

Result<Image> decode_image(std::span<const uint8_t> bytes, const std::string& name) {
  static constexpr uint8_t kJpegMagic[3] = {0xFF, 0xD8, 0xFF};
  static constexpr uint8_t kPngMagic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  if (bytes.empty()) return data_loss("{}: empty file, not an image", name);
  if (bytes.size() >= 3 && std::equal(kJpegMagic, kJpegMagic + 3, bytes.begin())) {
    return decode_jpeg(bytes, name);
  }
  if (bytes.size() >= 8 && std::equal(kPngMagic, kPngMagic + 8, bytes.begin())) {
    return decode_png(bytes, name);
  }
  const size_t n = std::min<size_t>(bytes.size(), 4);
  std::string head;
  for (size_t i = 0; i < n; ++i) head += fmt::format("{}{:02x}", i == 0 ? "" : " ", bytes[i]);
  return invalid_argument("{}: not a JPEG or PNG image (starts with bytes {})", name, head);
}

Result<Image> load_image(const std::string& path) {
  RINFER_ASSIGN_OR_RETURN(std::string bytes, read_regular_file(path, kMaxImageFileBytes));
  return decode_image(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), path);
}

}  // namespace rinfer
