#include "formats/model_cache.h"

#include <cstdlib>
#include <filesystem>

#include "core/error.h"

namespace rinfer {

namespace fs = std::filesystem;

std::string model_cache_dir() {
  if (const char* d = std::getenv("RINFER_MODEL_DIR"); d != nullptr && *d != '\0') return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0') {
    return (fs::path(x) / "recipes-infer" / "models").string();
  }
  const char* home = std::getenv("HOME");
  return (fs::path(home != nullptr ? home : ".") / ".cache" / "recipes-infer" / "models").string();
}

namespace {

bool looks_like_path(const std::string& s) {
  return s.find('/') != std::string::npos || s.ends_with(".gguf") ||
         s.ends_with(".safetensors") || s.ends_with(".pth") || s.ends_with(".pt");
}

// `<cache>/<name>.gguf`, `.pth`, then `<cache>/<name>/`; "" when none.
std::string in_cache(const std::string& name) {
  std::error_code ec;
  const fs::path cache = model_cache_dir();
  const fs::path gguf = cache / (name + ".gguf");
  if (fs::is_regular_file(gguf, ec)) return gguf.string();
  const fs::path pth = cache / (name + ".pth");
  if (fs::is_regular_file(pth, ec)) return pth.string();
  const fs::path dir = cache / name;
  if (fs::is_directory(dir, ec)) return dir.string();
  return "";
}

}  // namespace

Result<std::string> resolve_recipe_model(const std::string& ref) {
  if (!ref.empty() && !looks_like_path(ref)) {
    if (std::string cached = in_cache(ref); !cached.empty()) return cached;
  }
  return resolve_model(ref);
}

Result<std::string> resolve_model(const std::string& name_or_path) {
  if (name_or_path.empty()) return invalid_argument("empty model name");
  std::error_code ec;
  if (fs::exists(name_or_path, ec)) return name_or_path;
  if (looks_like_path(name_or_path)) {
    return not_found("{}: no such file or directory", name_or_path);
  }
  if (std::string cached = in_cache(name_or_path); !cached.empty()) return cached;
  const fs::path cache = model_cache_dir();
  return not_found(
      "model '{}' is neither a path nor a model in the cache {} (run scripts/fetch-models.sh, "
      "or set RINFER_MODEL_DIR)",
      name_or_path, cache.string());
}

Result<std::string> resolve_cache_file(const std::string& name_or_path, const std::string& ext) {
  if (name_or_path.empty()) return invalid_argument("empty file name");
  std::error_code ec;
  if (fs::exists(name_or_path, ec)) return name_or_path;
  if (name_or_path.find('/') != std::string::npos || name_or_path.ends_with(ext)) {
    return not_found("{}: no such file", name_or_path);
  }
  const fs::path f = fs::path(model_cache_dir()) / (name_or_path + ext);
  if (fs::is_regular_file(f, ec)) return f.string();
  return not_found(
      "'{}' is neither a path nor a file in the cache ({} does not exist; run "
      "scripts/fetch-models.sh, or set RINFER_MODEL_DIR)",
      name_or_path, f.string());
}

}  // namespace rinfer
