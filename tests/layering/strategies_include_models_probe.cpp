// Must not compile: layer 2 (rinfer_strategies) including layer 3 (tests/CMakeLists.txt).
#include "models/model.h"

int layering_probe_strategies_include_models() { return 0; }
