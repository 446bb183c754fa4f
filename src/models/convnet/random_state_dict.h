// Random weights of a real convolutional network's shape, as a PyTorch state dict made in memory
// (a recipe's `model: random:<shape>`): the network's speed and behaviour without its checkpoint
// or any Python. The shapes and names are torchvision's, so the recipe's classifier.network
// describes them as it describes the real checkpoint.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "formats/torch_checkpoint.h"

namespace rinfer::convnet {

// "resnet-50": torchvision's resnet50 (bottleneck blocks 3, 4, 6, 3; 1000 classes; 25.6 M
// parameters).
std::vector<std::string> random_shape_names();

// The state dict of `shape`, drawn from a fixed seed (the same weights every time): convolutions
// and the linear head as torchvision initializes them (Kaiming normal, fan out), batch norms with
// non-trivial statistics (weight in [0.5, 1], bias and running mean in [-0.1, 0.1], running
// variance in [0.5, 1.5]). `source` names it in errors ("random:resnet-50").
Result<TorchCheckpoint> random_state_dict(std::string_view shape, const std::string& source);

}  // namespace rinfer::convnet
