#include "core/tensor.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "test_util.h"

namespace rinfer {
namespace {

std::vector<float> values_of(const Tensor& t) {
  auto f = t.to_f32();
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  const float* p = f->data_as<float>();
  return std::vector<float>(p, p + f->numel());
}

TEST(Tensor, EmptyIsAlignedContiguousAndWritable) {
  auto t = Tensor::empty({3, 5, 7}, DType::kF32);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->numel(), 105);
  EXPECT_EQ(t->nbytes(), 420u);
  EXPECT_TRUE(t->is_contiguous());
  EXPECT_EQ(t->strides(), (Dims{35, 7, 1}));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t->data()) % kHostAlignment, 0u);
  EXPECT_NE(t->mutable_data(), nullptr);
  EXPECT_EQ(t->to_string(), "f32 [3, 5, 7] cpu");
}

TEST(Tensor, RejectsBadShapes) {
  EXPECT_FALSE(Tensor::empty({2, -1}, DType::kF32).ok());
  EXPECT_FALSE(Tensor::empty({3, 33}, DType::kQ4_0).ok());  // 33 is not whole blocks
  auto huge = Tensor::empty({int64_t{1} << 40, int64_t{1} << 40}, DType::kF32);
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("overflow"), std::string::npos)
      << huge.status().to_string();
  auto oom = Tensor::empty({int64_t{1} << 60}, DType::kI8);
  EXPECT_FALSE(oom.ok());
}

TEST(Tensor, ViewSliceTransposeContiguous) {
  // [4, 6] filled with i*6+j+1 (never zero).
  std::vector<float> v(24);
  for (int i = 0; i < 24; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i + 1);
  auto t = Tensor::from_f32({4, 6}, v);
  ASSERT_TRUE(t.ok());

  auto r = t->view({2, -1, 3});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->shape(), (Dims{2, 4, 3}));
  EXPECT_EQ(r->data(), t->data());  // no copy
  EXPECT_FALSE(t->view({5, 5}).ok());
  EXPECT_FALSE(t->view({-1, -1}).ok());

  auto s = t->slice(1, 2, 5);  // columns 2..4
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(s->is_contiguous());
  EXPECT_EQ(values_of(*s), (std::vector<float>{3, 4, 5, 9, 10, 11, 15, 16, 17, 21, 22, 23}));
  EXPECT_FALSE(s->view({12}).ok());
  EXPECT_FALSE(t->slice(0, 3, 5).ok());
  EXPECT_FALSE(t->slice(2, 0, 1).ok());

  auto tr = t->transpose(0, 1);
  ASSERT_TRUE(tr.ok());
  EXPECT_EQ(tr->shape(), (Dims{6, 4}));
  auto c = tr->contiguous();
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->is_contiguous());
  const float* p = c->data_as<float>();
  for (int i = 0; i < 6; ++i) {
    for (int j = 0; j < 4; ++j) EXPECT_EQ(p[i * 4 + j], v[static_cast<size_t>(j * 6 + i)]);
  }
  // Slices of views keep the buffer alive after the source is gone.
  Tensor keep;
  {
    auto tmp = Tensor::from_f32({4, 6}, v);
    keep = tmp->slice(0, 1, 2).value();
  }
  EXPECT_EQ(values_of(keep), (std::vector<float>{7, 8, 9, 10, 11, 12}));
}

TEST(Tensor, WrapIsReadOnlyAndChecksSize) {
  std::vector<uint16_t> bytes(64, 0x3c00);  // f16 1.0
  auto keep = std::make_shared<int>(0);
  auto t = Tensor::wrap(bytes.data(), 128, {8, 8}, DType::kF16, Device::cpu(), keep);
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->read_only());
  EXPECT_EQ(t->mutable_data(), nullptr);
  EXPECT_EQ(values_of(*t), std::vector<float>(64, 1.0f));
  EXPECT_FALSE(Tensor::wrap(bytes.data(), 127, {8, 8}, DType::kF16, Device::cpu(), keep).ok());
  auto w = Tensor::wrap_mutable(bytes.data(), 128, {64}, DType::kF16, Device::cpu(), keep);
  ASSERT_TRUE(w.ok());
  EXPECT_FALSE(w->read_only());
  EXPECT_EQ(w->mutable_data(), bytes.data());
}

TEST(Tensor, QuantizedRowsSliceAndDequantize) {
  // Two rows of one Q8_0 block each: d = 0.5 (f16 0x3800), qs = i - 16 (row 0), 2*(i-16) row 1.
  std::vector<uint8_t> raw(2 * 34);
  for (int r = 0; r < 2; ++r) {
    uint8_t* b = raw.data() + r * 34;
    b[0] = 0x00;
    b[1] = 0x38;
    for (int i = 0; i < 32; ++i)
      b[2 + i] = static_cast<uint8_t>(static_cast<int8_t>((r + 1) * (i - 16)));
  }
  auto t = Tensor::wrap(raw.data(), raw.size(), {2, 32}, DType::kQ8_0, Device::cpu(), nullptr);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->nbytes(), 68u);
  auto row1 = t->slice(0, 1, 2);
  ASSERT_TRUE(row1.ok());
  EXPECT_EQ(row1->data(), raw.data() + 34);
  auto f = values_of(*row1);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(f[static_cast<size_t>(i)], 0.5f * 2 * (i - 16));
  EXPECT_FALSE(t->transpose(0, 1).ok());
  EXPECT_FALSE(t->slice(1, 0, 16).ok());  // not whole blocks
  EXPECT_FALSE(t->view({64, 1}).ok());    // innermost dim not whole blocks
  EXPECT_TRUE(t->view({64}).ok());
}

TEST(Tensor, ForceCopyOfContiguousRandomData) {
  auto v = test::random_floats(1000, 7);
  auto t = Tensor::from_f32({10, 100}, v);
  ASSERT_TRUE(t.ok());
  auto c = t->contiguous(true);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(c->data(), t->data());
  EXPECT_EQ(std::memcmp(c->data(), v.data(), 4000), 0);
}

TEST(Device, Parse) {
  EXPECT_EQ(parse_device("cpu").value(), Device::cpu());
  EXPECT_EQ(parse_device("cuda").value(), Device::cuda(0));
  EXPECT_EQ(parse_device("cuda:3").value(), Device::cuda(3));
  EXPECT_EQ(Device::cuda(2).to_string(), "cuda:2");
  for (const char* bad : {"gpu", "cuda:", "cuda:x", "cuda:-1", "cuda:1x", ""}) {
    auto r = parse_device(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("expected 'cpu'"), std::string::npos);
  }
}

}  // namespace
}  // namespace rinfer
