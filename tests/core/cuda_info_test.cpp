#include "core/cuda_info.h"

#include <gtest/gtest.h>

namespace rinfer {
namespace {

TEST(CudaInfo, ReportsWhyThereIsNoDevice) {
  auto devices = cuda_devices();
  if (!cuda_compiled()) {
    ASSERT_FALSE(devices.ok());
    EXPECT_EQ(devices.status().code(), StatusCode::kUnsupported);
    EXPECT_NE(devices.status().message().find("without CUDA"), std::string::npos);
    return;
  }
  if (!devices.ok()) {
    // A CUDA build on a machine without a usable GPU: a clear device error, never a crash.
    EXPECT_EQ(devices.status().code(), StatusCode::kDeviceError);
    EXPECT_FALSE(devices.status().message().empty());
    GTEST_SKIP() << "no usable CUDA device: " << devices.status().to_string();
  }
  ASSERT_FALSE(devices->empty());
  for (const auto& d : *devices) {
    EXPECT_FALSE(d.name.empty());
    EXPECT_GT(d.total_memory, 0u);
    EXPECT_GT(d.multiprocessors, 0);
  }
}

TEST(CudaInfo, SelfTestLaunchesAKernel) {
  auto devices = cuda_devices();
  if (!devices.ok()) GTEST_SKIP() << devices.status().to_string();
  for (const auto& d : *devices) {
    Status st = cuda_self_test(d.index);
    EXPECT_TRUE(st.ok()) << "device " << d.index << " (" << d.name << "): " << st.to_string();
  }
}

}  // namespace
}  // namespace rinfer
