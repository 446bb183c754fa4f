// Fused inverted-residual blocks on the CPU (fusion.blocks): the expansion (1x1), the depthwise
// convolution and the projection (1x1) of a block run band by band of output rows, so the
// expanded tensor and the depthwise output live only in per-thread band buffers that stay in
// the L2, never whole in memory. A band's expanded rows include the depthwise halo (recomputed
// by the neighbouring band). Every op is the unfused path's with its fused epilogue, and each
// output is computed by the same arithmetic: the logits are bit-identical to the unfused blocks'.
#pragma once

#include <cstdint>
#include <vector>

#include "models/convnet/convnet_graph.h"
#include "models/taps.h"
#include "ops/cpu/gemm_packed_f32.h"

namespace rinfer::convnet {

// The chain expand -> depthwise -> project starting at node i (each read only by the next), or
// false.
bool is_fusable_block(const Graph& g, size_t i);

// The chains the CPU fuses, taken greedily in order: fused[i] = 1 where a chain starts, 2 inside
// it (its depthwise and projection nodes), 0 elsewhere.
std::vector<int8_t> fusable_chains(const Graph& g);

// Whether node i's output is a tap (image_classifier.h: ImageBatch::taps): every node but a
// chain's expansion and depthwise outputs (which fused blocks never write whole), the chains
// found by their structure whether or not the batch norms are folded, so that every recipe of a
// network taps the same outputs.
std::vector<bool> tapped_nodes(const Graph& g);

// The tap of node i's output (its kind: pooled for the global average pool, logits for the head,
// else block_out).
TapKind tap_kind_of_node(const Node& n);

struct FusedBlock {
  const Node* expand = nullptr;
  const Node* depthwise = nullptr;
  const Node* project = nullptr;
  const cpu::PackedF32* expand_w = nullptr;
  const cpu::PackedF32* project_w = nullptr;
};

// x: the block's input [n, h, w, c_in]; res: the projection's residual (or null); y: the
// projection's output [n, oh, ow, c_out].
Status run_fused_block(const cpu::OpContext& ctx, const FusedBlock& f, int64_t n, int64_t h,
                       int64_t w, const float* x, const float* res, float* y);

}  // namespace rinfer::convnet
