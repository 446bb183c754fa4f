// Test helper: a copy of a GGUF file with some metadata entries replaced (or added), for tests
// that need a real model with one thing changed (a name with bad bytes, an unknown chat
// template, ...). Tensors are copied byte for byte from the mapped input.
#pragma once

#include <map>
#include <string>

#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "rinfer/status.h"

namespace rinfer::test {

inline Status copy_gguf(const std::string& in, const std::string& out,
                        std::map<std::string, GgufWriter::Value> replace) {
  auto file = GgufFile::open(in);
  if (!file.ok()) return file.status();
  GgufWriter w(3, static_cast<uint32_t>(file->alignment()));
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
    Status s = w.add_tensor_view(std::string(t.name), t.dtype, t.shape, {t.data, t.nbytes});
    if (!s.ok()) return s;
  }
  return w.write(out);
}

}  // namespace rinfer::test
