#!/usr/bin/env python3
"""Writes the PyTorch checkpoint fixtures of tests/formats/torch_checkpoint_test.cpp.

Run with a Python that has torch (written with torch 2.15):
    python tests/tools/gen_torch_fixtures.py [OUT_DIR]   # default tests/data/torch

Files (a few KB each):
  sd_zip.pt      torch.save default (zip) of a state dict with every supported storage dtype,
                 a storage offset, two tensors sharing one storage, scalars, a size-1 dimension
                 with an odd stride and an OrderedDict _metadata attribute
  sd_legacy.pt   the same state dict, _use_new_zipfile_serialization=False
  sd_proto4.pt   a small state dict, zip, pickle_protocol=4 (FRAME, MEMOIZE, STACK_GLOBAL)
  module_legacy.pt  a module's state_dict() (nn.Linear + nn.BatchNorm1d), legacy, protocol 5
  permuted.pt    a transposed and a permuted (TensorFlow-layout conv weight) tensor: dense, not
                 row-major
  strided.pt     a tensor with a step-2 stride (not dense)
  v3.pt          float8 tensors (torch._utils._rebuild_tensor_v3 on an untyped storage) and an
                 nn.Parameter (torch._utils._rebuild_parameter)
  uint16.pt      a uint16 tensor (a dtype rinfer does not support)
  expected.json  per file: the format and, per tensor in order, name, dtype (rinfer's name),
                 shape, copied (permuted -> row-major) and the values in row-major order
"""

import collections
import json
import os
import sys

import torch

DTYPE_NAMES = {
    torch.float32: "f32",
    torch.float64: "f64",
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.int64: "i64",
    torch.int32: "i32",
    torch.int16: "i16",
    torch.int8: "i8",
    torch.uint8: "u8",
    torch.bool: "bool",
    torch.float8_e4m3fn: "f8_e4m3",
    torch.float8_e5m2: "f8_e5m2",
}


def values(t):
    t = t.detach().contiguous().reshape(-1)
    if t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2, torch.float16, torch.bfloat16):
        t = t.to(torch.float64)
    if t.dtype == torch.bool:
        t = t.to(torch.int64)
    return t.tolist()


def describe(sd, fmt):
    out = []
    for name, t in sd.items():
        out.append({
            "name": name,
            "dtype": DTYPE_NAMES[t.dtype],
            "shape": list(t.shape),
            "copied": t.dim() > 0 and t.numel() > 1 and not t.is_contiguous(),
            "values": values(t),
        })
    return {"format": fmt, "tensors": out}


def main_state_dict():
    g = torch.Generator().manual_seed(7)
    sd = collections.OrderedDict()
    sd["conv.weight"] = torch.randn(4, 3, 2, 2, generator=g)
    sd["conv.bias"] = torch.randn(4, generator=g, dtype=torch.float64)
    sd["norm.half"] = (torch.randn(5, generator=g) * 10).to(torch.float16)
    sd["norm.bf16"] = (torch.randn(3, 2, generator=g) * 3).to(torch.bfloat16)
    sd["steps"] = torch.tensor(123456789012, dtype=torch.int64)  # a scalar
    sd["ids"] = torch.tensor([-5, 7, 1 << 40], dtype=torch.int64)
    sd["i32"] = torch.tensor([[-1, 2], [3, -4]], dtype=torch.int32)
    sd["i16"] = torch.tensor([-300, 300, 7], dtype=torch.int16)
    sd["i8"] = torch.tensor([-128, 127, 3], dtype=torch.int8)
    sd["u8"] = torch.tensor([0, 255, 9, 1], dtype=torch.uint8)
    sd["mask"] = torch.tensor([True, False, True])
    sd["scale"] = torch.tensor(0.25)  # an f32 scalar
    # Two views of one storage, the second with a storage offset.
    base = torch.randn(20, generator=g)
    sd["shared.a"] = base[2:8].view(2, 3)
    sd["shared.b"] = base[10:18].view(2, 4)
    # A size-1 dimension with a stride no row-major layout would have.
    sd["odd_stride"] = torch.randn(6, generator=g).as_strided((2, 1, 3), (3, 7, 1))
    sd["empty"] = torch.zeros(0, 3)
    sd._metadata = collections.OrderedDict([("", {"version": 1}), ("conv", {"version": 2})])
    return sd


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "data", "torch")
    os.makedirs(out_dir, exist_ok=True)
    expected = {}

    def save(name, sd, fmt, **kwargs):
        path = os.path.join(out_dir, name)
        torch.save(sd, path, **kwargs)
        loaded = torch.load(path, weights_only=False)  # our own files
        assert list(loaded.keys()) == list(sd.keys())
        expected[name] = describe(loaded, fmt)

    sd = main_state_dict()
    save("sd_zip.pt", sd, "pytorch (zip)")
    save("sd_legacy.pt", sd, "pytorch (legacy)", _use_new_zipfile_serialization=False)

    small = collections.OrderedDict()
    small["w"] = torch.arange(1, 7, dtype=torch.float32).reshape(2, 3) / 8
    small["n"] = torch.tensor([3, -1], dtype=torch.int32)
    save("sd_proto4.pt", small, "pytorch (zip)", pickle_protocol=4)

    torch.manual_seed(3)
    module = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    save("module_legacy.pt", module.state_dict(), "pytorch (legacy)", pickle_protocol=5,
         _use_new_zipfile_serialization=False)

    g = torch.Generator().manual_seed(11)
    perm = collections.OrderedDict()
    perm["transposed"] = torch.randn(3, 4, generator=g).t()
    # [kh, kw, cin, cout] storage seen as [cout, cin, kh, kw], as EfficientNet-Lite0 has it.
    perm["conv_hwio"] = torch.randn(2, 3, 4, 5, generator=g).permute(3, 2, 0, 1)
    perm["plain"] = torch.randn(2, 2, generator=g)
    save("permuted.pt", perm, "pytorch (zip)")

    strided = collections.OrderedDict()
    strided["ok"] = torch.ones(2)
    strided["every_other"] = torch.arange(8, dtype=torch.float32)[::2]
    path = os.path.join(out_dir, "strided.pt")
    torch.save(strided, path)

    v3 = {
        "f8": torch.tensor([0.5, -2.0, 448.0, 0.015625]).to(torch.float8_e4m3fn),
        "f8b": torch.tensor([1.5, -0.25, 57344.0]).to(torch.float8_e5m2),
        "param": torch.nn.Parameter(torch.tensor([1.0, -1.0, 2.5])),
    }
    path = os.path.join(out_dir, "v3.pt")
    torch.save(v3, path)
    expected["v3.pt"] = describe(torch.load(path, weights_only=False), "pytorch (zip)")

    torch.save({"u16": torch.tensor([1, 2], dtype=torch.uint16)}, os.path.join(out_dir, "uint16.pt"))

    with open(os.path.join(out_dir, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
        f.write("\n")
    for name in sorted(os.listdir(out_dir)):
        print(f"{name}: {os.path.getsize(os.path.join(out_dir, name))} bytes")


if __name__ == "__main__":
    main()
