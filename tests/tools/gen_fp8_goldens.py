"""FP8 E4M3 goldens from PyTorch's float8_e4m3fn cast, for tests/core/quantize_8bit_test.cpp.

Run where PyTorch is installed (the GPU machine):
    python3 tests/tools/gen_fp8_goldens.py tests/data/fp8/e4m3_torch.json
The inputs: every decoded code's neighbourhood (the value and the floats next to it), every
midpoint between neighbouring magnitudes and the floats next to it, the edges (464, 480,
infinities, NaN, subnormals), then random float bit patterns from a fixed seed; both signs.
"""

import json
import math
import random
import struct
import sys

import torch


def f32(bits):
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def bits_of(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def main():
    out = sys.argv[1]
    mags = sorted({float(v) for v in torch.arange(0, 127, dtype=torch.uint8)
                   .view(torch.float8_e4m3fn).to(torch.float32).tolist()})
    inputs = set()
    for m in mags:
        b = bits_of(m)
        inputs.update({b, b + 1, max(b - 1, 0)})
    for lo, hi in zip(mags, mags[1:]):
        b = bits_of((lo + hi) / 2)
        inputs.update({b, b + 1, b - 1})
    for x in (464.0, 480.0, 448.0, 500.0, 1e30, math.inf, 2.0 ** -10, 3 * 2.0 ** -10,
              2.0 ** -12, 2.0 ** -6):
        b = bits_of(x)
        inputs.update({b, b + 1, b - 1})
    inputs.add(0x7FC00000)  # NaN
    rng = random.Random(41)
    while len(inputs) < 6000:
        inputs.add(rng.getrandbits(31))
    inputs = sorted(inputs)
    inputs += [b | 0x80000000 for b in inputs]
    values = torch.tensor([f32(b) for b in inputs], dtype=torch.float32)
    codes = values.to(torch.float8_e4m3fn).view(torch.uint8).tolist()
    with open(out, "w") as f:
        json.dump({"torch": torch.__version__, "bits": inputs, "codes": codes}, f)
    print(f"wrote {len(inputs)} goldens from torch {torch.__version__} to {out}")


if __name__ == "__main__":
    main()
