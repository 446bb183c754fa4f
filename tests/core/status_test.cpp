#include "rinfer/status.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.h"
#include "core/mapped_file.h"
#include "test_util.h"

namespace rinfer {
namespace {

Result<int> parse_positive(int v) {
  if (v <= 0) return invalid_argument("value {} is not positive", v);
  return v;
}

Result<int> twice(int v) {
  RINFER_ASSIGN_OR_RETURN(int x, parse_positive(v));
  return 2 * x;
}

Status check(int v) {
  RINFER_RETURN_IF_ERROR(parse_positive(v).status());
  return ok_status();
}

TEST(Status, ValuesAndPropagation) {
  EXPECT_TRUE(ok_status().ok());
  EXPECT_EQ(twice(4).value(), 8);
  auto bad = twice(-3);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().to_string(), "invalid argument: value -3 is not positive");
  EXPECT_EQ(bad.status().with_context("recipe.yaml").message(),
            "recipe.yaml: value -3 is not positive");
  EXPECT_TRUE(check(1).ok());
  EXPECT_FALSE(check(0).ok());
}

TEST(MappedFile, MapsFilesAndReportsErrors) {
  auto path = test::write_temp_file("mapped.bin", "hello world");
  auto f = MappedFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ((*f)->size(), 11u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>((*f)->data()), 5), "hello");

  auto empty = MappedFile::open(test::write_temp_file("empty.bin", ""));
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ((*empty)->size(), 0u);

  auto missing = MappedFile::open("/nonexistent/model.gguf");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/nonexistent/model.gguf"), std::string::npos);

  auto dir = MappedFile::open(std::filesystem::temp_directory_path().string());
  ASSERT_FALSE(dir.ok());
  EXPECT_NE(dir.status().message().find("directory"), std::string::npos);
}

}  // namespace
}  // namespace rinfer
