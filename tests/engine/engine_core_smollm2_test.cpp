// The engine core on the real SmolLM2-135M-Instruct with the fast kernels (SIMD, int8
// activations, threads): 64 chat prompts served together against each served alone
// (smollm2_served.h). A decode row alone runs the matrix-vector kernel, in a batch the tiled
// one, so the summation order differs.
#include <gtest/gtest.h>

#include "core/thread_pool.h"
#include "smollm2_served.h"

namespace rinfer {
namespace {

TEST(EngineCoreSmolLM2, SixtyFourPromptsTogetherMatchEachAlone) {
#if RINFER_TEST_SLOW_BUILD
  GTEST_SKIP() << "64 x 2 replies of 24 tokens take minutes in the sanitizer build; this runs "
                  "in the optimized build";
#endif
  ThreadPool pool(0);
  LoadOptions lo;
  lo.cpu.ops.pool = &pool;
  test::expect_smollm2_batched_matches_alone(lo, "SmolLM2 on the CPU");
}

}  // namespace
}  // namespace rinfer
