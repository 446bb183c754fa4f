// Test helpers: a copy of a GGUF model with one thing changed, for tests that need a real model
// with a defect or a twist (a name with bad bytes, an unknown chat template, a corrupt weight).
// Tensors are written from the mapped input, not copied in memory.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <map>
#include <string>

#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "rinfer/status.h"
#include "test_util.h"

namespace rinfer::test {

// Replaces a tensor's bytes: called with the tensor and a copy of its data.
using TensorPatch = std::function<bool(const GgufTensorInfo& t, std::string& bytes)>;

// `in` copied to `out` with the metadata entries in `replace` set (replaced or added); `patch`
// (optional) may rewrite tensors: it returns true for the tensors it changed.
inline Status copy_gguf(const std::string& in, const std::string& out,
                        std::map<std::string, GgufWriter::Value> replace,
                        const TensorPatch& patch = nullptr, int* patched = nullptr) {
  auto file = GgufFile::open(in);
  if (!file.ok()) return file.status();
  GgufWriter w(file->version(), static_cast<uint32_t>(file->alignment()));
  for (const auto& [key, value] : file->metadata()) {
    auto it = replace.find(std::string(key));
    if (it != replace.end()) {
      w.set(it->first, std::move(it->second));
      replace.erase(it);
    } else {
      w.set(std::string(key), GgufWriter::Value::copy_of(value));
    }
  }
  for (auto& [key, value] : replace) w.set(key, std::move(value));
  for (const GgufTensorInfo& t : file->tensors()) {
    std::string bytes;
    if (patch) bytes.assign(reinterpret_cast<const char*>(t.data), t.nbytes);
    Status s;
    if (patch && patch(t, bytes)) {
      s = w.add_tensor(std::string(t.name), t.dtype, t.shape, std::move(bytes));
      if (patched != nullptr) ++*patched;
    } else {
      s = w.add_tensor_view(std::string(t.name), t.dtype, t.shape, {t.data, t.nbytes});
    }
    if (!s.ok()) return s;
  }
  return w.write(out);
}

// Writes `name` under the test temp dir: `src` with element `index` of the f32 tensor `tensor`
// set to `value` (NaN, inf: a model whose weights are corrupt). Returns the path, or "" with a
// test failure.
inline std::string poisoned_gguf(const std::string& src, const std::string& name,
                                 const std::string& tensor, int64_t index, float value) {
  const std::string path = write_temp_file(name, "");
  int patched = 0;
  const Status st = copy_gguf(
      src, path, {},
      [&](const GgufTensorInfo& t, std::string& bytes) {
        if (t.name != tensor) return false;
        EXPECT_EQ(t.dtype, DType::kF32) << tensor;
        EXPECT_LT(index, t.n_elements) << tensor;
        if (t.dtype != DType::kF32 || index >= t.n_elements) return false;
        std::memcpy(bytes.data() + index * 4, &value, 4);
        return true;
      },
      &patched);
  EXPECT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(patched, 1) << "no f32 tensor '" << tensor << "' in " << src;
  return st.ok() && patched == 1 ? path : "";
}

}  // namespace rinfer::test
