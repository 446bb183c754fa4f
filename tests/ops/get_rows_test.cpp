// get_rows: rows of tables of several dtypes equal dequantize_row of the same bytes; ids out of
// range are an error naming the id; argument errors.

#include <gtest/gtest.h>

#include <vector>

#include "ops/cpu/ops.h"
#include "ops_test_util.h"

namespace rinfer::cpu {
namespace {

TEST(GetRows, MatchesDequantizeRow) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ4_0, DType::kQ4_1, DType::kQ8_0,
                  DType::kQ6_K, DType::kQ4_K}) {
    const int64_t n_rows = 11, n = 512;
    const auto bytes = test::random_weights(t, n_rows, n, 3);
    const Tensor table = test::make_tensor(t, n_rows, n, bytes);
    const std::vector<int32_t> ids = {3, 0, 10, 3};
    std::vector<float> out(ids.size() * n);
    ASSERT_TRUE(get_rows(table, ids, out.data()).ok());
    const int64_t rb = static_cast<int64_t>(bytes.size()) / n_rows;
    std::vector<float> expect(n);
    for (size_t i = 0; i < ids.size(); ++i) {
      ASSERT_TRUE(dequantize_row(t, bytes.data() + ids[i] * rb, expect.data(), n).ok());
      for (int64_t j = 0; j < n; ++j) {
        ASSERT_EQ(out[i * n + static_cast<size_t>(j)], expect[static_cast<size_t>(j)])
            << dtype_name(t) << " id " << ids[i];
      }
    }
  }
}

TEST(GetRows, IdOutOfRange) {
  const Tensor table =
      test::make_tensor(DType::kF32, 4, 8, test::random_weights(DType::kF32, 4, 8, 1));
  std::vector<float> out(16);
  std::vector<int32_t> ids = {1, 4};
  Status st = get_rows(table, ids, out.data());
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange);
  EXPECT_NE(st.message().find("id 4 at position 1"), std::string::npos) << st.message();
  ids = {-1};
  st = get_rows(table, ids, out.data());
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange);
  EXPECT_NE(st.message().find("id -1"), std::string::npos) << st.message();
}

TEST(GetRows, Errors) {
  std::vector<float> out(16);
  const std::vector<int32_t> ids = {0};
  EXPECT_EQ(get_rows(Tensor(), ids, out.data()).code(), StatusCode::kInvalidArgument);
  auto t1 = Tensor::empty({8}, DType::kF32);
  ASSERT_TRUE(t1.ok());
  EXPECT_EQ(get_rows(*t1, ids, out.data()).code(), StatusCode::kInvalidArgument);
  const Tensor table =
      test::make_tensor(DType::kF32, 4, 8, test::random_weights(DType::kF32, 4, 8, 1));
  EXPECT_EQ(get_rows(table, ids, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(get_rows(table, {}, nullptr).ok());
}

}  // namespace
}  // namespace rinfer::cpu
