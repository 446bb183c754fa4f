// `rinfer quantize` on the tiny synthetic llama (f32, f16 and q5_0 matrices): which tensors
// convert, what is kept byte for byte, the metadata, the values after the round trip, and the
// errors (unknown type, a row length that is not a whole number of blocks), and the output
// path checks (OutputPath* tests below).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "test_util.h"

namespace rinfer {
namespace {

std::string rinfer_bin() { return RINFER_BINARY; }

std::vector<float> values(const GgufTensorInfo& t) {
  auto w = Tensor::wrap(t.data, t.nbytes, Dims(std::span<const int64_t>(t.shape)), t.dtype,
                        Device::cpu(), nullptr);
  EXPECT_TRUE(w.ok());
  auto f = w->to_f32();
  EXPECT_TRUE(f.ok());
  return {f->data_as<float>(), f->data_as<float>() + f->numel()};
}

TEST(QuantizeCli, ConvertsMatricesKeepsTheRest) {
  const std::string in = test::test_data_path("llama/tiny_llama.gguf");
  const std::string out = test::write_temp_file("tiny_q8_0.gguf", "");
  auto r = test::run_command(rinfer_bin() + " quantize '" + in + "' '" + out + "' --type q8_0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("14 tensors converted to q8_0, 6 kept"), std::string::npos) << r.out;
  EXPECT_EQ(r.err.find('\r'), std::string::npos);  // no progress line when not on a terminal

  auto a = GgufFile::open(in);
  auto b = GgufFile::open(out);
  ASSERT_TRUE(a.ok() && b.ok()) << b.status().message();
  EXPECT_EQ(b->get_uint("general.file_type"), 7u);  // LLAMA_FTYPE_MOSTLY_Q8_0
  EXPECT_EQ(b->get_string("general.name"), a->get_string("general.name"));
  EXPECT_EQ(b->get_uint("llama.block_count"), 2u);
  ASSERT_EQ(a->tensors().size(), b->tensors().size());
  for (const GgufTensorInfo& ta : a->tensors()) {
    SCOPED_TRACE(std::string(ta.name));
    const GgufTensorInfo* tb = b->find_tensor(ta.name);
    ASSERT_NE(tb, nullptr);
    EXPECT_EQ(tb->shape, ta.shape);
    const bool matrix = ta.shape.size() == 2 && ta.name != "token_embd.weight";
    if (!matrix) {
      EXPECT_EQ(tb->dtype, ta.dtype);
      ASSERT_EQ(tb->nbytes, ta.nbytes);
      EXPECT_EQ(std::memcmp(tb->data, ta.data, ta.nbytes), 0);
    } else {
      EXPECT_EQ(tb->dtype, DType::kQ8_0);
      EXPECT_LT(test::rel_l2(values(*tb), values(ta)), 1e-2);
    }
  }
}

// The input may be a cached model's name, as anywhere a model is expected.
TEST(QuantizeCli, TakesACachedModelsName) {
  const std::string cache =
      (std::filesystem::path(test::write_temp_file("tmp", "")).parent_path() / "qcache")
          .string();
  std::filesystem::create_directories(cache);
  std::filesystem::copy_file(test::test_data_path("llama/tiny_llama.gguf"),
                             cache + "/tiny-cached.gguf",
                             std::filesystem::copy_options::overwrite_existing);
  const std::string out = test::write_temp_file("tiny_cached_q8_0.gguf", "");
  auto r = test::run_command("RINFER_MODEL_DIR='" + cache + "' " + rinfer_bin() +
                             " quantize tiny-cached '" + out + "' --type q8_0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("14 tensors converted to q8_0, 6 kept"), std::string::npos) << r.out;
  r = test::run_command("RINFER_MODEL_DIR='" + cache + "' " + rinfer_bin() +
                        " quantize not-cached '" + out + "' --type q8_0");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("model 'not-cached' is neither a path nor a model in the cache"),
            std::string::npos)
      << r.err;
}

TEST(QuantizeCli, KeepLayersAndEmbeddings) {
  const std::string in = test::test_data_path("llama/tiny_llama.gguf");
  const std::string out = test::write_temp_file("tiny_q4_1.gguf", "");
  auto r = test::run_command(rinfer_bin() + " quantize '" + in + "' '" + out +
                             "' --type q4_1 --keep-layers=-1 --convert-embeddings --threads 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto a = GgufFile::open(in);
  auto b = GgufFile::open(out);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(b->get_uint("general.file_type"), 3u);
  EXPECT_EQ(b->find_tensor("token_embd.weight")->dtype, DType::kQ4_1);
  EXPECT_EQ(b->find_tensor("blk.0.attn_q.weight")->dtype, DType::kQ4_1);
  EXPECT_EQ(b->find_tensor("blk.0.attn_k.weight")->dtype, DType::kQ4_1);  // from q5_0
  EXPECT_EQ(b->find_tensor("blk.1.attn_q.weight")->dtype, DType::kF32);   // layer -1 kept
  EXPECT_EQ(b->find_tensor("blk.1.ffn_down.weight")->dtype, DType::kQ5_0);
  const auto q = values(*b->find_tensor("blk.0.ffn_up.weight"));
  const auto f = values(*a->find_tensor("blk.0.ffn_up.weight"));
  const double err = test::rel_l2(q, f);
  EXPECT_GT(err, 1e-3);  // 4-bit: visibly lossy
  EXPECT_LT(err, 0.15);
}

TEST(QuantizeCli, Errors) {
  const std::string in = test::test_data_path("llama/tiny_llama.gguf");
  const std::string out = test::write_temp_file("bad.gguf", "");
  auto r = test::run_command(rinfer_bin() + " quantize '" + in + "' '" + out + "' --type q4_k");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--type q4_k: expected one of f16, bf16, q8_0, q4_0, q4_1"),
            std::string::npos)
      << r.err;
  r = test::run_command(rinfer_bin() + " quantize '" + in + "' '" + out +
                        "' --type q8_0 --keep-layers 5");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--keep-layers 5: the model has 2 layers"), std::string::npos) << r.err;

  // A matrix with rows of 48 values: not a whole number of 32-element blocks.
  GgufWriter w;
  w.set("general.architecture", GgufWriter::Value::string("llama"));
  std::vector<float> v(4 * 48, 0.5f);
  std::string bytes(reinterpret_cast<const char*>(v.data()), v.size() * 4);
  ASSERT_TRUE(w.add_tensor("blk.0.ffn_down.weight", DType::kF32, {4, 48}, bytes).ok());
  const std::string ragged = test::write_temp_file("ragged.gguf", w.to_bytes().value());
  r = test::run_command(rinfer_bin() + " quantize '" + ragged + "' '" + out + "' --type q8_0");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("tensor 'blk.0.ffn_down.weight' (f32 [4, 48]) has rows of 48 values, not "
                       "a multiple of q8_0's block size 32"),
            std::string::npos)
      << r.err;
  // f16 has no blocks: the same file converts.
  r = test::run_command(rinfer_bin() + " quantize '" + ragged + "' '" + out + "' --type f16");
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

namespace fs = std::filesystem;

std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A fresh directory for the output-path tests.
std::string output_dir(const std::string& name) {
  const fs::path d = fs::path(test::write_temp_file("anchor", "")).parent_path() / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

// Guards "quantize replaces whatever the output path is": each bad output is refused before the
// input is opened, so the input here is not even a GGUF file (a check made after the conversion,
// or none, would fail on the input instead: and could never reach /dev/null). Each run is under
// `timeout 20`, shows no progress line (stderr is the one error line), names the output and its
// type, and leaves the path as it was.
TEST(QuantizeCli, OutputPathCheckedBeforeAnyWork) {
  const std::string d = output_dir("quantize_out");
  const std::string bad_input = d + "/not-a-model.gguf";
  std::ofstream(bad_input) << "this is not a GGUF file";
  const std::string fifo = d + "/fifo.gguf";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  const std::string dir = d + "/a-directory";
  fs::create_directories(dir);
  const std::string dangling = d + "/dangling.gguf";
  ASSERT_EQ(::symlink("nowhere.gguf", dangling.c_str()), 0);
  struct Case {
    std::string out;
    std::string message;
  };
  const Case cases[] = {
      {"/dev/null", "/dev/null: not a regular file (a character device)"},
      {fifo, fifo + ": not a regular file (a FIFO)"},
      {dir, dir + ": is a directory"},
      {dangling, dangling + ": a symbolic link to a missing file ('nowhere.gguf')"},
      {d + "/missing/out.gguf", "the directory '" + d + "/missing' does not exist"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.out);
    auto r = test::run_command("timeout 20 " + rinfer_bin() + " quantize '" + bad_input + "' '" +
                               c.out + "' --type q8_0");
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_EQ(r.err.rfind("rinfer: error: ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;  // no progress
    EXPECT_EQ(r.err.find("not-a-model"), std::string::npos) << "the input was opened: " << r.err;
  }
  struct stat st {};
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  ASSERT_EQ(::lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  EXPECT_TRUE(fs::is_directory(dir));
  EXPECT_TRUE(fs::is_empty(dir));
  EXPECT_TRUE(fs::is_symlink(dangling));
  EXPECT_FALSE(fs::exists(d + "/nowhere.gguf"));
  EXPECT_FALSE(fs::exists(d + "/missing"));
  // Nothing else appeared (no temporary file): the input, the FIFO, the directory, the link.
  EXPECT_EQ(std::distance(fs::directory_iterator(d), {}), 4);
}

// Guards "the output may be the input": the same file, by path, through a symlink or by another
// spelling, is refused and the input is left byte for byte.
TEST(QuantizeCli, OutputPathIsTheInput) {
  const std::string d = output_dir("quantize_self");
  const std::string in = d + "/model.gguf";
  fs::copy_file(test::test_data_path("llama/tiny_llama.gguf"), in);
  const std::string before = slurp(in);
  const std::string link = d + "/link.gguf";
  ASSERT_EQ(::symlink("model.gguf", link.c_str()), 0);
  for (const std::string& out :
       {in, link, d + "/../" + fs::path(d).filename().string() + "/model.gguf"}) {
    SCOPED_TRACE(out);
    auto r = test::run_command("timeout 20 " + rinfer_bin() + " quantize '" + in + "' '" + out +
                               "' --type q8_0");
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find(out + ": is the same file as the input '" + in + "'"), std::string::npos)
        << r.err;
  }
  EXPECT_EQ(slurp(in), before);
  EXPECT_TRUE(fs::is_symlink(link));
}

// Guards "a symlink's relationship is destroyed": an output that is a symlink to a regular file
// is written through; the link survives and the file it points to holds the new model.
TEST(QuantizeCli, OutputPathSymlinkIsWrittenThrough) {
  const std::string d = output_dir("quantize_link");
  fs::create_directories(d + "/models");
  const std::string target = d + "/models/current.gguf";
  std::ofstream(target) << "old content";
  const std::string link = d + "/latest.gguf";
  ASSERT_EQ(::symlink("models/current.gguf", link.c_str()), 0);
  const std::string in = test::test_data_path("llama/tiny_llama.gguf");
  auto r = test::run_command(rinfer_bin() + " quantize '" + in + "' '" + link + "' --type q8_0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(fs::read_symlink(link), "models/current.gguf");
  auto b = GgufFile::open(target);
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(b->get_uint("general.file_type"), 7u);
  EXPECT_EQ(std::distance(fs::directory_iterator(d + "/models"), {}), 1);  // no temporary left
}

}  // namespace
}  // namespace rinfer
