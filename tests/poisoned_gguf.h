// A copy of a GGUF model with one value of one f32 tensor replaced (NaN, inf): a model file whose
// weights are corrupt, for the tests that its non-finite logits become clear errors.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "test_util.h"

namespace rinfer::test {

// Writes `name` under the test temp dir: `src` with element `index` of the f32 tensor `tensor`
// set to `value` (the other tensors are written from the mapping, not copied in memory). Returns
// the path, or "" with a test failure.
inline std::string poisoned_gguf(const std::string& src, const std::string& name,
                                 const std::string& tensor, int64_t index, float value) {
  auto file = GgufFile::open(src);
  EXPECT_TRUE(file.ok()) << file.status().to_string();
  if (!file.ok()) return "";
  GgufWriter w(file->version(), static_cast<uint32_t>(file->alignment()));
  for (const auto& [k, v] : file->metadata()) w.set(std::string(k), GgufWriter::Value::copy_of(v));
  bool found = false;
  for (const GgufTensorInfo& t : file->tensors()) {
    Status st;
    if (t.name == tensor) {
      EXPECT_EQ(t.dtype, DType::kF32) << tensor;
      EXPECT_LT(index, t.n_elements) << tensor;
      std::string bytes(reinterpret_cast<const char*>(t.data), t.nbytes);
      std::memcpy(bytes.data() + index * 4, &value, 4);
      st = w.add_tensor(std::string(t.name), t.dtype, t.shape, std::move(bytes));
      found = true;
    } else {
      st = w.add_tensor_view(std::string(t.name), t.dtype, t.shape, {t.data, t.nbytes});
    }
    EXPECT_TRUE(st.ok()) << st.to_string();
  }
  EXPECT_TRUE(found) << "no tensor '" << tensor << "' in " << src;
  const std::string path = write_temp_file(name, "");
  const Status st = w.write(path);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return found && st.ok() ? path : "";
}

}  // namespace rinfer::test
