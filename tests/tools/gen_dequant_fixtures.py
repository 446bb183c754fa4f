#!/usr/bin/env python3
"""Writes the dequantization fixtures read by tests/core/dtype_test.cpp.

For every GGUF block format this creates 4 blocks of random bytes, overwrites their scale
fields with finite random values (never NaN or inf; block 1 gets a subnormal f16 scale), and
dequantizes them with gguf-py (`gguf.quants.dequantize`, the numpy port of ggml's
dequantize_row_*), an implementation independent of ours:

  tests/data/dequant/<fmt>.bin  the raw blocks
  tests/data/dequant/<fmt>.f32  the expected values, little-endian f32

gguf-py has no Q8_K dequantizer (Q8_K is only an activation format in ggml), so its expected
values are computed here with numpy straight from ggml's definition: y = d (f32) * qs (int8).

Usage: python3 tests/tools/gen_dequant_fixtures.py   (needs `pip install gguf numpy`)
The output is deterministic; rerunning it must leave the committed files unchanged.
"""

from __future__ import annotations

import pathlib
import sys

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import quants

N_BLOCKS = 4
SEED = 20240611
OUT_DIR = pathlib.Path(__file__).resolve().parents[1] / "data" / "dequant"

# name: (gguf type, block bytes, byte offsets of the f16 scale fields in a block)
FORMATS: dict[str, tuple[Q, int, tuple[int, ...]]] = {
    "q4_0": (Q.Q4_0, 18, (0,)),          # d
    "q4_1": (Q.Q4_1, 20, (0, 2)),        # d, m
    "q5_0": (Q.Q5_0, 22, (0,)),          # d
    "q5_1": (Q.Q5_1, 24, (0, 2)),        # d, m
    "q8_0": (Q.Q8_0, 34, (0,)),          # d
    "q2_k": (Q.Q2_K, 84, (80, 82)),      # d, dmin after scales[16] and qs[64]
    "q3_k": (Q.Q3_K, 110, (108,)),       # d after hmask[32], qs[64], scales[12]
    "q4_k": (Q.Q4_K, 144, (0, 2)),       # d, dmin
    "q5_k": (Q.Q5_K, 176, (0, 2)),       # d, dmin
    "q6_k": (Q.Q6_K, 210, (208,)),       # d after ql[128], qh[64], scales[16]
    "q8_k": (Q.Q8_K, 292, ()),           # f32 d at 0, handled below
}


def random_finite_f16(rng: np.random.Generator) -> int:
    """Random f16 bits with a finite value (exponent field != 31)."""
    while True:
        bits = int(rng.integers(0, 1 << 16))
        if (bits >> 10) & 0x1F != 0x1F:
            return bits


def random_subnormal_f16(rng: np.random.Generator) -> int:
    return int(rng.integers(1, 1 << 10)) | (int(rng.integers(0, 2)) << 15)


def make_blocks(name: str, rng: np.random.Generator) -> np.ndarray:
    _, block_bytes, scale_offsets = FORMATS[name]
    blocks = rng.integers(0, 256, size=(N_BLOCKS, block_bytes), dtype=np.uint8)
    for b in range(N_BLOCKS):
        for k, off in enumerate(scale_offsets):
            bits = random_subnormal_f16(rng) if (b == 1 and k == 0) else random_finite_f16(rng)
            blocks[b, off : off + 2] = np.array([bits], dtype="<u2").view(np.uint8)
    if name == "q8_k":
        # f32 d: random sign and mantissa, exponent in [-20, 20] so d * 127 stays finite.
        for b in range(N_BLOCKS):
            exp = int(rng.integers(-20, 21)) + 127
            bits = (int(rng.integers(0, 2)) << 31) | (exp << 23) | int(rng.integers(0, 1 << 23))
            blocks[b, 0:4] = np.array([bits], dtype="<u4").view(np.uint8)
    return blocks


def expected(name: str, blocks: np.ndarray) -> np.ndarray:
    qtype = FORMATS[name][0]
    if name == "q8_k":
        d = blocks[:, 0:4].copy().view("<f4").astype(np.float32)  # (N_BLOCKS, 1)
        qs = blocks[:, 4:260].copy().view(np.int8).astype(np.float32)
        return (d * qs).reshape(-1)
    return quants.dequantize(blocks.reshape(-1), qtype).astype(np.float32, copy=False)


def main() -> int:
    rng = np.random.default_rng(SEED)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    for name in FORMATS:
        blocks = make_blocks(name, rng)
        values = expected(name, blocks)
        assert values.dtype == np.float32 and values.size == N_BLOCKS * (
            256 if name.endswith("_k") else 32
        )
        assert np.isfinite(values).all(), name
        (OUT_DIR / f"{name}.bin").write_bytes(blocks.tobytes())
        (OUT_DIR / f"{name}.f32").write_bytes(values.astype("<f4").tobytes())
        print(f"{name}: {blocks.nbytes} bytes -> {values.size} values")
    return 0


if __name__ == "__main__":
    sys.exit(main())
