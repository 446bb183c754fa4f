#include "models/llama/shapes.h"

#include "core/error.h"

namespace rinfer::llama {

std::vector<std::string> shape_names() { return {"llama3-8b", "smollm2", "tiny"}; }

Result<DecoderHParams> named_shape(std::string_view name) {
  DecoderHParams hp;
  hp.architecture = "llama";
  hp.rope.mode = cpu::RopeMode::kNeox;
  hp.norm_eps = 1e-5f;
  if (name == "llama3-8b") {
    hp.n_vocab = 32000;
    hp.n_embd = 4096;
    hp.n_layer = 32;
    hp.n_head = 32;
    hp.n_head_kv = 8;
    hp.head_dim = 128;
    hp.n_ff = 14336;
    hp.n_ctx_train = 8192;
    hp.rope.freq_base = 500000.0f;
  } else if (name == "smollm2") {
    hp.n_vocab = 49152;
    hp.n_embd = 576;
    hp.n_layer = 30;
    hp.n_head = 9;
    hp.n_head_kv = 3;
    hp.head_dim = 64;
    hp.n_ff = 1536;
    hp.n_ctx_train = 8192;
    hp.rope.freq_base = 100000.0f;
    hp.tied_output = true;
  } else if (name == "tiny") {
    hp.n_vocab = 512;
    hp.n_embd = 64;
    hp.n_layer = 2;
    hp.n_head = 4;
    hp.n_head_kv = 2;
    hp.head_dim = 16;
    hp.n_ff = 160;
    hp.n_ctx_train = 1024;
    hp.rope.freq_base = 10000.0f;
  } else {
    return invalid_argument("unknown model shape '{}' (llama3-8b, smollm2 or tiny)", name);
  }
  hp.rope.n_rot = hp.head_dim;
  return hp;
}

}  // namespace rinfer::llama
