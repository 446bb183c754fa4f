#!/usr/bin/env python3
"""Reference logits of the image classifiers, for tests/models/convnet_test.cpp.

PyTorch runs each network from the same checkpoint the tests load: torchvision's MobileNetV2
and efficientnet_lite_pytorch's EfficientNet-Lite0 (pip install torch torchvision pillow
efficientnet_lite_pytorch==0.1.0). For every photo: torchvision's Resize(256), CenterCrop(224),
ToTensor, Normalize(mean, std) on the PIL image, then the network in float64 (so the fixture is
the exact function, not one float32 rounding of it). Also a synthetic input that C++ computes
bit for bit the same way, x[c, h, w] = sin(0.001 * (h * 224 + w) + c) * 2, so the networks are
checked apart from the image preprocessing.

  python tests/tools/gen_vision_goldens.py MODEL_DIR   # the model cache (scripts/fetch-models.sh)
writes tests/data/vision/classifier_goldens.json. No ResNet-50 weights ship in a package: with
--resnet it also writes MODEL_DIR/resnet-50-random.pth, torchvision's ResNet-50 with seeded
random weights (batch-norm statistics randomized too, so folding them is tested), and its logits
on the synthetic input. On the GPU machine (no efficientnet_lite_pytorch, no photos needed):
  python tests/tools/gen_vision_goldens.py MODEL_DIR --resnet-only OUT.json
writes the checkpoint and OUT.json: the committed goldens with the ResNet-50 entry of this
checkpoint (tests/ops_cuda/convnet_cuda_test.cpp reads it through RINFER_VISION_GOLDENS).
"""
import json
import math
import os
import sys

import torch
import torchvision
from PIL import Image
from torchvision import transforms

PHOTOS = ["chelsea.png", "coffee.png", "astronaut.png", "rocket.jpg", "motorcycle_left.png"]
NETWORKS = {
    "mobilenet-v2": ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
    "efficientnet-lite0": ([127 / 255] * 3, [128 / 255] * 3),
}


def network(name, cache):
    sd = torch.load(os.path.join(cache, name + ".pth"), map_location="cpu", weights_only=True)
    if name == "mobilenet-v2":
        m = torchvision.models.mobilenet_v2()
    else:
        from efficientnet_lite_pytorch import EfficientNet
        m = EfficientNet.from_name("efficientnet-lite0")
    m.load_state_dict(sd)
    return m.eval().double()


def synthetic():
    h = torch.arange(224, dtype=torch.float64).view(224, 1)
    w = torch.arange(224, dtype=torch.float64).view(1, 224)
    planes = [torch.sin(0.001 * (h * 224 + w) + c) * 2 for c in range(3)]
    return torch.stack(planes).unsqueeze(0)


def random_resnet50(cache):
    torch.manual_seed(0)
    m = torchvision.models.resnet50()
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.weight.uniform_(0.5, 1.0)
                mod.bias.uniform_(-0.1, 0.1)
                mod.running_mean.uniform_(-0.1, 0.1)
                mod.running_var.uniform_(0.5, 1.5)
    path = os.path.join(cache, "resnet-50-random.pth")
    torch.save(m.state_dict(), path)
    print("wrote", path)
    return m.eval().double()


def resnet_only(cache, out_path):
    here = os.path.join(os.path.dirname(__file__), "..", "data", "vision", "classifier_goldens.json")
    with open(here) as f:
        out = json.load(f)
    m = random_resnet50(cache)
    with torch.no_grad():
        logits = m(synthetic())[0]
    old = out["networks"].get("resnet-50-random", {}).get("synthetic")
    out["networks"]["resnet-50-random"] = {"synthetic": [float("%.9g" % v) for v in logits.tolist()]}
    if old:
        same = max(abs(a - b) for a, b in zip(old, out["networks"]["resnet-50-random"]["synthetic"]))
        print("resnet-50-random: max |logit - committed logit| = %.3g" % same)
    with open(out_path, "w") as f:
        json.dump(out, f, separators=(",", ":"))
    print("wrote", out_path)


def main():
    cache = sys.argv[1]
    if "--resnet-only" in sys.argv:
        return resnet_only(cache, sys.argv[sys.argv.index("--resnet-only") + 1])
    out = {"source": "torch " + torch.__version__ + ", torchvision " + torchvision.__version__,
           "photos": PHOTOS, "networks": {}}
    for name, (mean, std) in NETWORKS.items():
        m = network(name, cache)
        tf = transforms.Compose([transforms.Resize(256), transforms.CenterCrop(224),
                                 transforms.ToTensor(), transforms.Normalize(mean, std)])
        entry = {"photos": {}}
        with torch.no_grad():
            for p in PHOTOS:
                img = Image.open(os.path.join(cache, "photos", p)).convert("RGB")
                x = tf(img).unsqueeze(0).double()
                logits = m(x)[0]
                entry["photos"][p] = {
                    "top5": logits.topk(5).indices.tolist(),
                    "logits": [float("%.9g" % v) for v in logits.tolist()],
                }
            logits = m(synthetic())[0]
            entry["synthetic"] = [float("%.9g" % v) for v in logits.tolist()]
        out["networks"][name] = entry
        print(name, {p: e["top5"][:2] for p, e in entry["photos"].items()})
    if "--resnet" in sys.argv:
        m = random_resnet50(cache)
        with torch.no_grad():
            logits = m(synthetic())[0]
        out["networks"]["resnet-50-random"] = {
            "synthetic": [float("%.9g" % v) for v in logits.tolist()]}
    path = os.path.join(os.path.dirname(__file__), "..", "data", "vision", "classifier_goldens.json")
    with open(path, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")
    print("wrote", os.path.normpath(path), os.path.getsize(path), "bytes")


if __name__ == "__main__":
    main()
