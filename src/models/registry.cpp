// The model registry: open a source far enough to read its metadata, find the family in the
// table (models/families.cpp) that claims it, call the family's factory.
#include "models/registry.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>

#include "core/error.h"
#include "core/mapped_file.h"
#include "core/strings.h"
#include "formats/gguf.h"
#include "formats/hf_config.h"
#include "formats/model_info.h"
#include "formats/torch_checkpoint.h"

namespace rinfer {

namespace {

namespace fs = std::filesystem;

constexpr std::string_view kRandom = "random:";

Result<ModelSource> open_hf(const std::string& path) {
  std::error_code ec;
  const bool is_dir = fs::is_directory(path, ec);
  if (is_dir && !fs::exists(fs::path(path) / "model.safetensors", ec) &&
      !fs::exists(fs::path(path) / "model.safetensors.index.json", ec)) {
    return not_found(
        "{}: the directory holds no model.safetensors or model.safetensors.index.json "
        "(a model directory needs config.json and safetensors weights)",
        path);
  }
  fs::path dir = is_dir ? fs::path(path) : fs::path(path).parent_path();
  if (dir.empty()) dir = ".";
  const fs::path cfg = dir / "config.json";
  if (!fs::exists(cfg, ec)) {
    return not_found("{}: no config.json at '{}' (a Hugging Face model needs one)", path,
                     cfg.string());
  }
  RINFER_ASSIGN_OR_RETURN(HfConfig c, read_hf_config(cfg.string()));
  ModelSource s;
  s.path = path;
  s.meta.format = "safetensors";
  s.meta.architecture = c.model_type;
  s.meta.classes = c.architectures;
  s.hf = std::make_shared<const HfConfig>(std::move(c));
  return s;
}

Result<ModelSource> open_random(const std::string& path) {
  const std::string rest = path.substr(kRandom.size());
  const size_t colon = rest.find(':');
  const std::string dname = colon == std::string::npos ? "bf16" : rest.substr(colon + 1);
  const std::optional<DType> dtype = dtype_from_name(dname);
  if (!dtype) {
    return invalid_argument("{}: unknown weight type '{}' (random:<shape>[:<dtype>])", path,
                            dname);
  }
  ModelSource s;
  s.path = path;
  s.meta.format = "random";
  s.meta.architecture = rest.substr(0, colon);
  s.random_dtype = *dtype;
  return s;
}

// A source's metadata in words, for the error when no family claims it.
std::string describe_metadata(const ModelMetadata& m) {
  if (m.format == "safetensors") {
    return fmt::format("model_type {} in config.json (architectures [{}])",
                       rinfer::quoted(m.architecture), fmt::join(m.classes, ", "));
  }
  if (m.format == "gguf") return fmt::format("architecture {}", rinfer::quoted(m.architecture));
  if (m.format == "random") return fmt::format("random shape {}", rinfer::quoted(m.architecture));
  return m.format + " checkpoint";
}

}  // namespace

bool is_random_source(std::string_view path) { return path.starts_with(kRandom); }

const ModelFamily* find_family(const ModelMetadata& meta) {
  for (const ModelFamily& f : model_families()) {
    if (f.matches(meta)) return &f;
  }
  return nullptr;
}

namespace {

// The table in one line, for errors: "llama: GGUF llama, ...; bert: ...".
std::string families_line() {
  std::string s;
  for (const ModelFamily& f : model_families()) {
    s += fmt::format("{}{}: {}", s.empty() ? "" : "; ", f.name, f.matches_text);
  }
  return s;
}

}  // namespace

Result<ModelSource> open_model_source(const std::string& path) {
  if (is_random_source(path)) return open_random(path);
  // A Hugging Face checkpoint: a directory with config.json + safetensors, or a .safetensors
  // (or sharded .safetensors.index.json) file with config.json next to it.
  std::error_code ec;
  if (fs::is_directory(path, ec) || path.ends_with(".safetensors") ||
      path.ends_with(".safetensors.index.json")) {
    return open_hf(path);
  }
  RINFER_ASSIGN_OR_RETURN(std::shared_ptr<const MappedFile> file, MappedFile::open(path));
  ModelSource s;
  s.path = path;
  if (TorchCheckpoint::sniff(file->bytes())) {
    s.meta.format = "pytorch";
    return s;
  }
  RINFER_ASSIGN_OR_RETURN(GgufFile g, GgufFile::parse(file));
  s.gguf = std::make_shared<const GgufFile>(std::move(g));
  RINFER_ASSIGN_OR_RETURN(std::string_view arch, s.gguf->require_string("general.architecture"));
  s.meta.format = "gguf";
  s.meta.architecture = std::string(arch);
  return s;
}

Result<std::unique_ptr<ModelSample>> load_model(const std::string& path, const LoadOptions& opts) {
  RINFER_ASSIGN_OR_RETURN(ModelSource src, open_model_source(path));
  const ModelFamily* f = find_family(src.meta);
  if (f == nullptr) {
    return unsupported("{}: no model sample for {} (the families: {})", path,
                       describe_metadata(src.meta), families_line());
  }
  return f->load(src, opts);
}

Status check_task(const ModelMetadata& meta, ModelTask task) {
  const ModelFamily* f = find_family(meta);
  if (f == nullptr) {
    return unsupported("no model sample for {} yet (the families: {})", describe_metadata(meta),
                       families_line());
  }
  if (f->task != task) {
    return unsupported("the {} family's models are for {}, not {}", f->name,
                       model_task_name(f->task), model_task_name(task));
  }
  return ok_status();
}

ModelMetadata metadata_of(const ModelInfo& info) {
  ModelMetadata meta;
  meta.format = info.format.starts_with("pytorch") ? "pytorch" : info.format;
  meta.architecture = info.architecture;
  meta.classes = info.classes;
  return meta;
}

Status check_text_generation(const ModelInfo& info) {
  RINFER_RETURN_IF_ERROR(check_task(metadata_of(info), ModelTask::kTextGeneration));
  if (info.tokenizer.empty() || info.tokenizer == "none") {
    return unsupported(
        "the file holds no tokenizer: its weights load (rinfer parity on token ids) but text "
        "generation needs one");
  }
  return ok_status();
}

Result<std::unique_ptr<DecoderModel>> load_decoder_model(const std::string& path,
                                                         const LoadOptions& opts) {
  RINFER_ASSIGN_OR_RETURN(std::unique_ptr<ModelSample> m, load_model(path, opts));
  if (m->task() != ModelTask::kTextGeneration) {
    return unsupported("{}: a {} model cannot generate text (it is an encoder: use rinfer embed)",
                       path, model_task_name(m->task()));
  }
  return std::unique_ptr<DecoderModel>(static_cast<DecoderModel*>(m.release()));
}

}  // namespace rinfer
