// The helpers of bench_util.h are implemented in src/tools/bench_report.cpp (shared with
// `rinfer bench`); this library only carries the include path for the bench programs.
#include "bench_util.h"
