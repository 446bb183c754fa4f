// Must not compile: layer 1 (rinfer_core) including layer 4 (tests/CMakeLists.txt, Layering.*).
#include "engine/engine_core.h"

int layering_probe_core_includes_engine() { return 0; }
