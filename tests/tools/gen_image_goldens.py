#!/usr/bin/env python3
"""Writes the image fixtures read by tests/image/image_test.cpp.

Small synthetic images (odd sizes, a few KB each) in every PNG layout the decoder handles and
JPEGs with 4:2:0, 4:2:2 and 4:4:4 subsampling, progressive and grayscale, each with the pixels
PIL decodes from it (Image.open(...).convert("RGB")), plus PIL/torchvision's outputs for
resizing (Image.resize BILINEAR), torchvision's Resize(int) and CenterCrop, and ToTensor +
Normalize:

  tests/data/image/<name>.png|.jpg   the images
  tests/data/image/<name>.rgb        PIL's decoded pixels, [h, w, 3] uint8
  tests/data/image/ops/<case>.rgb    expected resize / crop outputs, [h, w, 3] uint8
  tests/data/image/ops/<case>.f32    expected normalized tensors, [3, h, w] little-endian f32
  tests/data/image/bad/*             hand-patched headers (zero and 30000 x 30000 sizes)
  tests/data/image/manifest.json     what each file is and what the test expects, and 240
                                     random-size resize / Resize(int) / CenterCrop cases on
                                     splitmix64 pixels (FNV-1a 64 hashes of PIL's outputs)

The PNGs in 16-bit and interlaced (Adam7) layouts are written by a small encoder here (PIL
writes neither). For 16-bit grayscale the expected pixels are the high byte of each sample, not
PIL's: PIL's I;16 -> RGB conversion clips at 255 (see src/image/image.h).

For the real photos (scikit-image's data/chelsea.png and data/coffee.png, not committed: the
test reads them from the model cache's photos/ (scripts/fetch-models.sh photos) when present) it records FNV-1a 64 hashes of
the decoded pixels, of torchvision's Resize(256) + CenterCrop(224) and of the ImageNet-normalized
tensor, with a few sampled pixels. The photos are found in the installed scikit-image package.

Usage: python3 tests/tools/gen_image_goldens.py   (needs numpy, pillow, torch, torchvision,
scikit-image). The output is deterministic; rerunning it must leave the committed files
unchanged.
"""

from __future__ import annotations

import io
import json
import pathlib
import struct
import zlib

import numpy as np
from PIL import Image
import torch
import torchvision.transforms as T

SEED = 20250611
OUT_DIR = pathlib.Path(__file__).resolve().parents[1] / "data" / "image"
MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]


def fnv1a64(data: bytes) -> str:
    h = 0xCBF29CE484222325
    for b in data:
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def splitmix_bytes(seed: int, n: int) -> np.ndarray:
    """n bytes, the top byte of each splitmix64 output from `seed` (as the test makes them)."""
    mask = 0xFFFFFFFFFFFFFFFF
    state = seed & mask
    out = np.empty(n, np.uint8)
    for i in range(n):
        state = (state + 0x9E3779B97F4A7C15) & mask
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        z ^= z >> 31
        out[i] = z >> 56
    return out


def synthetic(w: int, h: int, rng: np.random.Generator) -> np.ndarray:
    """Smooth shapes with noise and a few saturated pixels: [h, w, 3] uint8."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    r = 128 + 90 * np.sin(x / 4.0) * np.cos(y / 6.0)
    g = 255 * x / max(w - 1, 1) * 0.6 + 80 * (y / max(h - 1, 1))
    b = np.where(((x // 5) + (y // 4)) % 2 == 0, 200.0, 40.0)
    img = np.stack([r, g, b], axis=-1) + rng.normal(0, 18, (h, w, 3))
    img = np.clip(np.rint(img), 0, 255).astype(np.uint8)
    img[0, 0] = [255, 255, 255]
    img[h - 1, w - 1] = [0, 0, 0]
    return img


def chunk(kind: bytes, data: bytes) -> bytes:
    crc = zlib.crc32(kind + data) & 0xFFFFFFFF
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)


ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
         (0, 1, 1, 2)]


def encode_png(samples: np.ndarray, bit_depth: int, color_type: int, interlace: bool) -> bytes:
    """A PNG of samples [h, w, c] (uint8 or uint16), filter 0 on every row."""
    h, w = samples.shape[:2]
    data = samples.astype(">u2") if bit_depth == 16 else samples.astype(np.uint8)
    passes = ADAM7 if interlace else [(0, 0, 1, 1)]
    raw = bytearray()
    for x0, y0, dx, dy in passes:
        sub = data[y0::dy, x0::dx]
        if sub.shape[0] == 0 or sub.shape[1] == 0:
            continue
        for row in sub:
            raw += b"\x00" + row.tobytes()
    ihdr = struct.pack(">IIBBBBB", w, h, bit_depth, color_type, 0, 0, 1 if interlace else 0)
    idat = zlib.compress(bytes(raw), 9)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def pil_bytes(img: Image.Image, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


def decoded(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def patch_png_size(data: bytes, w: int, h: int) -> bytes:
    """The IHDR of `data` with another size and a correct CRC."""
    assert data[12:16] == b"IHDR"
    body = struct.pack(">II", w, h) + data[24:29]
    return data[:8] + chunk(b"IHDR", body) + data[33:]


def patch_jpeg_size(data: bytes, w: int, h: int) -> bytes:
    """The SOF0/SOF2 frame header of `data` with another size."""
    i = 2
    while True:
        assert data[i] == 0xFF
        marker = data[i + 1]
        length = struct.unpack(">H", data[i + 2:i + 4])[0]
        if marker in (0xC0, 0xC1, 0xC2):
            # FF Cx, length (2), precision (1), height (2), width (2)
            return data[:i + 5] + struct.pack(">HH", h, w) + data[i + 9:]
        i += 2 + length


def main() -> None:
    rng = np.random.default_rng(SEED)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    (OUT_DIR / "ops").mkdir(exist_ok=True)
    (OUT_DIR / "bad").mkdir(exist_ok=True)
    manifest: dict = {"decode": [], "bad": [], "ops": [], "random_ops": [], "photos": {}}

    def add_image(name: str, data: bytes, expected: np.ndarray | None = None, note: str = ""):
        (OUT_DIR / name).write_bytes(data)
        pixels = decoded(data) if expected is None else expected
        (OUT_DIR / (name + ".rgb")).write_bytes(np.ascontiguousarray(pixels).tobytes())
        manifest["decode"].append({"file": name, "width": int(pixels.shape[1]),
                                   "height": int(pixels.shape[0]), "expected": name + ".rgb",
                                   "note": note})

    rgb = synthetic(37, 23, rng)
    add_image("rgb.png", pil_bytes(Image.fromarray(rgb), "PNG"), note="8-bit RGB")
    gray = synthetic(29, 17, rng)[..., 1]
    add_image("gray.png", pil_bytes(Image.fromarray(gray, "L"), "PNG"), note="8-bit grayscale")
    bilevel = Image.fromarray(gray > 120).convert("1")
    add_image("bilevel.png", pil_bytes(bilevel, "PNG"), note="1-bit grayscale")
    pal = Image.fromarray(synthetic(31, 19, rng)).quantize(colors=23)
    add_image("palette.png", pil_bytes(pal, "PNG", transparency=3), note="palette with tRNS")
    rgba = np.concatenate([synthetic(23, 17, rng), rng.integers(0, 256, (17, 23, 1), np.uint8)], -1)
    add_image("rgba.png", pil_bytes(Image.fromarray(rgba, "RGBA"), "PNG"), note="RGBA")
    la = np.stack([gray, 255 - gray], -1)
    add_image("la.png", pil_bytes(Image.fromarray(la, "LA"), "PNG"), note="gray + alpha")
    rgb16 = rng.integers(0, 65536, (13, 19, 3)).astype(np.uint16)
    add_image("rgb16.png", encode_png(rgb16, 16, 2, False), note="16-bit RGB")
    gray16 = rng.integers(0, 65536, (11, 15)).astype(np.uint16)
    hi = np.repeat((gray16 >> 8).astype(np.uint8)[..., None], 3, -1)
    add_image("gray16.png", encode_png(gray16[..., None], 16, 0, False), expected=hi,
              note="16-bit grayscale: the high byte (PIL clips I;16 at 255)")
    add_image("interlaced.png", encode_png(synthetic(21, 14, rng), 8, 2, True),
              note="Adam7 interlaced RGB")

    photo = synthetic(37, 23, rng)
    big = synthetic(97, 61, rng)
    add_image("q90_420.jpg", pil_bytes(Image.fromarray(photo), "JPEG", quality=90, subsampling=2),
              note="baseline 4:2:0")
    add_image("q90_444.jpg", pil_bytes(Image.fromarray(photo), "JPEG", quality=90, subsampling=0),
              note="baseline 4:4:4")
    add_image("q80_422.jpg", pil_bytes(Image.fromarray(big), "JPEG", quality=80, subsampling=1),
              note="baseline 4:2:2")
    add_image("progressive.jpg",
              pil_bytes(Image.fromarray(big), "JPEG", quality=85, subsampling=2, progressive=True),
              note="progressive 4:2:0")
    add_image("gray.jpg", pil_bytes(Image.fromarray(gray, "L"), "JPEG", quality=90),
              note="grayscale")

    # Hand-patched headers.
    png = (OUT_DIR / "rgb.png").read_bytes()
    jpg = (OUT_DIR / "q90_420.jpg").read_bytes()
    prog = (OUT_DIR / "progressive.jpg").read_bytes()
    bad = [("zero.png", patch_png_size(png, 0, 0), "malformed data", "declares an empty image"),
           ("huge.png", patch_png_size(png, 30000, 30000), "out of range", "30000x30000"),
           ("zero.jpg", patch_jpeg_size(jpg, 0, 0), "malformed data", "declares an empty image"),
           ("huge.jpg", patch_jpeg_size(jpg, 30000, 30000), "out of range", "30000x30000"),
           ("huge_progressive.jpg", patch_jpeg_size(prog, 30000, 30000), "out of range",
            "30000x30000"),
           ("cmyk.jpg", pil_bytes(Image.fromarray(photo).convert("CMYK"), "JPEG", quality=90),
            "unsupported", "CMYK"),
           ("text.png", b"hello, this is no image\n", "invalid argument", "not a JPEG or PNG")]
    for name, data, code, message in bad:
        (OUT_DIR / "bad" / name).write_bytes(data)
        manifest["bad"].append({"file": "bad/" + name, "code": code, "message": message})

    # Resizing, cropping, normalizing: PIL and torchvision on PIL's decoded pixels.
    def add_op(source: str, op: str, args: list[int], out: Image.Image | torch.Tensor):
        case = f"{source.split('.')[0]}_{op}_{'x'.join(map(str, args))}"
        if isinstance(out, torch.Tensor):
            arr = out.numpy().astype("<f4")
            path = f"ops/{case}.f32"
            shape = list(arr.shape)
        else:
            arr = np.asarray(out.convert("RGB"))
            path = f"ops/{case}.rgb"
            shape = [arr.shape[0], arr.shape[1], 3]
        (OUT_DIR / path).write_bytes(np.ascontiguousarray(arr).tobytes())
        manifest["ops"].append({"source": source, "op": op, "args": args, "expected": path,
                                "shape": shape})

    for source in ["rgb.png", "q80_422.jpg"]:
        src = Image.open(OUT_DIR / source).convert("RGB")
        w, h = src.size
        # Pillow 13 runs the vertical pass first when the height shrinks by more than twice what
        # the width shrinks by: (w - 2, h - 5) and (w + 5, h - 1) are vertical first, (w - 2,
        # h - 4) is the boundary (horizontal first).
        sizes = [(16, 11), (80, 50), (w, 11), (16, h), (7, 5), (101, 3), (w - 1, h + 1), (1, 1),
                 (w - 2, h - 5), (w - 2, h - 4), (w + 5, h - 1), (3, 40)]
        for ow, oh in sizes:
            add_op(source, "resize", [ow, oh], src.resize((ow, oh), Image.BILINEAR))
        for s in [15, 19, 50]:
            add_op(source, "resize_shorter", [s], T.Resize(s)(src))
        for cw, ch in [(20, 13), (21, 12), (w, 10), (40, 30), (w + 3, 9), (8, h + 2)]:
            add_op(source, "center_crop", [cw, ch], T.CenterCrop((ch, cw))(src))
        # The classification pipeline on a small scale: Resize(s) + CenterCrop(c) + normalize.
        for s, c in [(19, 17), (30, 24)]:
            tensor = T.Compose([T.Resize(s), T.CenterCrop(c), T.ToTensor(),
                                T.Normalize(MEAN, STD)])(src)
            add_op(source, "pipeline", [s, c], tensor)

    # Many random sizes, hashes only: the input pixels come from splitmix64 (seeded with the
    # case's seed, one byte from the top of each output), which the test regenerates.
    cases = np.random.default_rng(SEED + 1)
    for i in range(240):
        w, h = (int(v) for v in cases.integers(1, 49, 2))
        seed = 1000 + i
        src = Image.fromarray(splitmix_bytes(seed, w * h * 3).reshape(h, w, 3))
        op = ["resize", "resize", "resize_shorter", "center_crop"][i % 4]
        if op == "resize":
            args = [int(v) for v in cases.integers(1, 65, 2)]
            out = src.resize((args[0], args[1]), Image.BILINEAR)
        elif op == "resize_shorter":
            args = [int(cases.integers(1, 65))]
            out = T.Resize(args[0])(src)
        else:
            args = [int(v) for v in cases.integers(1, 60, 2)]
            out = T.CenterCrop((args[1], args[0]))(src)
        arr = np.asarray(out.convert("RGB"))
        manifest["random_ops"].append({"seed": seed, "width": w, "height": h, "op": op,
                                       "args": args, "out": [arr.shape[1], arr.shape[0]],
                                       "fnv1a64": fnv1a64(arr.tobytes())})

    # The real photos: hashes only.
    import skimage

    data_dir = pathlib.Path(skimage.__file__).parent / "data"
    for name in ["chelsea.png", "coffee.png"]:
        img = Image.open(data_dir / name).convert("RGB")
        crop = T.Compose([T.Resize(256), T.CenterCrop(224)])(img)
        crop_arr = np.asarray(crop)
        tensor = T.Normalize(MEAN, STD)(T.ToTensor()(crop)).numpy().astype("<f4")
        idx = np.random.default_rng(SEED).integers(0, 224, (32, 2))
        manifest["photos"][name] = {
            "width": img.size[0], "height": img.size[1],
            "decoded_fnv1a64": fnv1a64(np.asarray(img).tobytes()),
            "crop_fnv1a64": fnv1a64(crop_arr.tobytes()),
            "tensor_fnv1a64": fnv1a64(tensor.tobytes()),
            "samples": [[int(y), int(x)] + crop_arr[y, x].tolist() for y, x in idx],
        }

    manifest["mean"] = MEAN
    manifest["std"] = STD
    (OUT_DIR / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    total = sum(p.stat().st_size for p in OUT_DIR.rglob("*") if p.is_file())
    print(f"wrote {len(list(OUT_DIR.rglob('*')))} files, {total} bytes, to {OUT_DIR}")


if __name__ == "__main__":
    main()
