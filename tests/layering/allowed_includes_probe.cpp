// Must compile: the control of the layering probes, a layer 3 target including its own folder
// and every layer below (tests/CMakeLists.txt), so a failing probe fails for its include alone.
#include "core/tensor.h"
#include "formats/gguf.h"
#include "kv/kv_spec.h"
#include "models/model.h"
#include "ops/cpu/ops.h"
#include "ops/params/op_params.h"
#include "strategies/registry.h"
#include "tokenizer/tokenizer.h"

int layering_probe_allowed() { return 0; }
