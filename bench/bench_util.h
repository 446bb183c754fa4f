// Shared by the benchmark programs: medians, machine description, provenance (git sha and
// whether the measured sources were dirty), and writing the JSON next to the printed table.
// The implementation lives in src/tools/bench_report.{h,cpp}, shared with `rinfer bench`.
#pragma once

#include "tools/bench_report.h"
