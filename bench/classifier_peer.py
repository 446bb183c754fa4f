#!/usr/bin/env python3
"""The peer of `rinfer bench` for image-classification recipes: PyTorch running the same network
from the same checkpoint (torchvision's MobileNetV2 and ResNet-50, efficientnet_lite_pytorch's
EfficientNet-Lite0), measured the same way (warm-up runs, then the median of timed runs over
--images images in batches), eager and torch.compile, channels-last, written as JSON for
`rinfer bench --peer`. scripts/bench-classifier.sh runs both, one after the other.

    python3 bench/classifier_peer.py NETWORK CHECKPOINT OUT.json [--device cpu|cuda]
        [--batch 1 --batch 32] [--images 64] [--threads N] [--dtype fp32|bf16|fp16]
        [--compile] [--repeat 3] [--warmup 1]
NETWORK: mobilenet-v2 | efficientnet-lite0 | resnet-50 (CHECKPOINT "random": seeded weights).
"""
import argparse
import json
import statistics
import time

import torch
import torchvision


def network(name, checkpoint):
    if name == "mobilenet-v2":
        m = torchvision.models.mobilenet_v2()
    elif name == "resnet-50":
        m = torchvision.models.resnet50()
    else:
        from efficientnet_lite_pytorch import EfficientNet
        m = EfficientNet.from_name("efficientnet-lite0")
    if checkpoint != "random":
        m.load_state_dict(torch.load(checkpoint, map_location="cpu", weights_only=True))
    return m.eval()


def measure(fn, x, images, batch, repeat, warmup, sync):
    secs = []
    for run in range(warmup + repeat):
        sync()
        t0 = time.perf_counter()
        for b0 in range(0, images, batch):
            fn(x[: min(batch, images - b0)])
        sync()
        if run >= warmup:
            secs.append(time.perf_counter() - t0)
    return secs


def main():
    p = argparse.ArgumentParser()
    p.add_argument("network")
    p.add_argument("checkpoint")
    p.add_argument("out")
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch", type=int, action="append")
    p.add_argument("--images", type=int, default=64)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "fp16"])
    p.add_argument("--compile", action="store_true", help="also torch.compile (the faster wins)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    a = p.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[a.dtype]
    m = network(a.network, a.checkpoint).to(a.device, dtype=dtype)
    m = m.to(memory_format=torch.channels_last)
    cuda = a.device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    results = []
    modes = [("eager", m)]
    if a.compile:
        modes.append(("compile", torch.compile(m)))
    for batch in a.batch or [1, 32]:
        x = torch.randn(batch, 3, 224, 224, device=a.device, dtype=dtype)
        x = x.to(memory_format=torch.channels_last)
        for mode, fn in modes:
            with torch.inference_mode():
                secs = measure(fn, x, a.images, batch, a.repeat, a.warmup, sync)
            med = statistics.median(secs)
            results.append({"batch": batch, "mode": mode, "layout": "channels-last",
                            "seconds": secs, "images_per_s": a.images / med})
            print(f"pytorch {a.network} {mode} batch {batch}: {a.images / med:.1f} images/s")
    out = {"name": "pytorch", "torch": torch.__version__, "torchvision": torchvision.__version__,
           "network": a.network, "device": a.device, "dtype": a.dtype,
           "threads": torch.get_num_threads(), "images": a.images, "results": results}
    with open(a.out, "w") as f:
        json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
