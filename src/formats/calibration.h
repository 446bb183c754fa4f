// The sidecar file `rinfer calibrate` writes and a recipe names (strategies.quantization.
// smoothing): per layer, the largest |x| of each input channel of four inputs: the normed
// attention input (read by q, k, v), the attention's output (o), the normed MLP input (gate, up)
// and the MLP's activation (ffn_down), measured over calibration text, and the migration
// strength alpha of SmoothQuant.
// The loader turns them into smoothing factors with the weights it holds (llama_loader.cpp):
//   s_j = clamp(max|X_j|^alpha / max|W_j|^(1 - alpha), 1e-5, 1e5), W_j: column j of every
//   matrix reading that input;
// column j of those matrices is multiplied by s_j and the input divided by it where it is made:
// the norm's weight j, row j of up (the activation is linear in it), or row c of v for the
// attention's output (channel j of query head h reads channel c = j's offset in v's head of h;
// the query heads that share a KV head share its factor, from their maxima together). That
// leaves the float model unchanged and moves the activations' outlier channels into the
// weights, where per-row int8 scales hold them.
//
// Which inputs are smoothed is the file's choice (`smooth`; rinfer calibrate --smooth): by
// default the normed inputs and the MLP's activation, whose outlier channels SmoothQuant is
// for; the attention's output has few in the models measured, and smoothing it changed nothing
// measurable there (docs/strategies/quantization.md).
//
// JSON: {"format": "rinfer-calibration", "version": 2, "model": NAME, "n_layer": L,
//        "n_embd": E, "n_ff": F, "q_dim": Q, "tokens": N, "alpha": A,
//        "smooth": [a subset of "attn_in", "o_in", "mlp_in", "down_in"],
//        "layers": [{"attn_in_absmax": [E numbers], "o_in_absmax": [Q numbers],
//                    "mlp_in_absmax": [E numbers], "down_in_absmax": [F numbers]}, ...]}
// Version 1 files (no q_dim, no o_in_absmax, no smooth) are read too: they smooth attn_in,
// mlp_in and down_in.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace rinfer {

struct CalibrationStats {
  std::string model;  // the model file's name it was measured on
  int64_t n_layer = 0;
  int64_t n_embd = 0;
  int64_t n_ff = 0;
  int64_t q_dim = 0;   // n_head x head_dim; 0 in a version 1 file (o_in empty)
  int64_t tokens = 0;  // calibration tokens seen
  double alpha = 0.5;  // migration strength, in [0, 1]
  // The inputs smoothed (`smooth`); o needs o_in.
  struct Inputs {
    bool attn = true, o = false, mlp = true, down = true;
  } smooth;
  // [n_layer][n_embd]: max |x| of the attention's and the MLP's normed inputs; [n_layer][n_ff]:
  // of the MLP's activation; [n_layer][q_dim]: of the attention's output (empty when q_dim is
  // 0). Finite and >= 0.
  std::vector<std::vector<float>> attn_in, mlp_in, down_in, o_in;
};

// Reads and checks a calibration file: errors name the file and the field (a missing or
// mistyped key, a list of the wrong length, a negative or non-finite value, alpha outside
// [0, 1], an unknown format or version).
Result<CalibrationStats> read_calibration(const std::string& path);

// The JSON text of `c` (checked as read_calibration checks), each maximum to four significant
// digits.
Result<std::string> calibration_json(const CalibrationStats& c);

// "attn_in,mlp_in,down_in" and the like (the names of `smooth`); parse_smooth_inputs reads
// such a list (commas, the names with or without "_in"), or an error naming the bad entry.
std::string smooth_inputs_text(const CalibrationStats::Inputs& in);
Result<CalibrationStats::Inputs> parse_smooth_inputs(std::string_view list);

// SmoothQuant's factor for one channel: act^alpha / w^(1 - alpha), clamped to [1e-5, 1e5];
// 1 where either maximum is 0 (a channel that never fires or that no weight reads).
float smoothing_factor(float act_absmax, float w_absmax, double alpha);

}  // namespace rinfer
