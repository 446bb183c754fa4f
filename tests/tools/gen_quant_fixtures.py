#!/usr/bin/env python3
"""Writes tests/data/quant/: an f32 input (4 rows x 64) and its quantization by gguf-py
(`pip install gguf numpy`), whose numpy quantizers follow ggml's quantize_row_*_ref, for
tests/core/quantize_test.cpp to match bit for bit.

Row 0: uniform [-1, 1); row 1: normal * 0.02 (weight-like); row 2: a block of one repeated
value and a block with one large outlier; row 3: a zero block and a block of exact ties at
the rounding points.
"""
import os
import sys

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "quant")
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(1234)
x = np.empty((4, 64), dtype=np.float32)
x[0] = rng.uniform(-1, 1, 64)
x[1] = rng.normal(0, 0.02, 64)
x[2, :32] = 0.375
x[2, 32:] = rng.uniform(-0.1, 0.1, 32)
x[2, 40] = 3.5
x[3, :32] = 0.0
x[3, 32:] = (np.arange(32, dtype=np.float32) - 16) * 0.5  # halves: exact rounding ties
x = x.astype(np.float32)
x.tofile(os.path.join(out, "input.f32"))
for name, qt in [("f16", T.F16), ("bf16", T.BF16), ("q8_0", T.Q8_0), ("q4_0", T.Q4_0),
                 ("q4_1", T.Q4_1)]:
    q = quants.quantize(x, qt)
    q.tofile(os.path.join(out, name + ".bin"))
    print(name, q.nbytes, "bytes", file=sys.stderr)
