// core/input_file.h: the one way user-named files are opened for reading. Guards the class
// "a reader blocks forever on a FIFO with no writer, or misreports a directory / device": every
// non-regular path is refused at once with its type named, and MappedFile::open (GGUF and
// safetensors) goes through the same check. An alarm turns a regression (a blocking open) into a
// failed test instead of a hung one.
#include "core/input_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <string>

#include "core/mapped_file.h"
#include "test_util.h"

namespace rinfer {
namespace {

namespace fs = std::filesystem;

// Kills the test process (SIGALRM's default action) if a call blocks for 20 s.
class ScopedAlarm {
 public:
  ScopedAlarm() { ::alarm(20); }
  ~ScopedAlarm() { ::alarm(0); }
};

std::string temp_dir() {
  return fs::path(test::write_temp_file("input_file_anchor", "")).parent_path().string();
}

std::string make_fifo(const std::string& name) {
  const std::string p = temp_dir() + "/" + name;
  ::unlink(p.c_str());
  EXPECT_EQ(::mkfifo(p.c_str(), 0644), 0) << p;
  return p;
}

bool contains(const Status& s, const std::string& text) {
  return s.message().find(text) != std::string::npos;
}

TEST(InputFile, RegularFileIsRead) {
  const std::string bytes = "some bytes\n\x01\x02 and more";
  const std::string p = test::write_temp_file("input_regular.txt", bytes);
  auto r = read_regular_file(p);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(*r, bytes);
  auto f = open_regular_file(p);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->size, bytes.size());
  EXPECT_TRUE(f->fd.valid());
}

TEST(InputFile, FifoWithoutWriterIsRefusedAtOnce) {
  ScopedAlarm alarm;
  const std::string p = make_fifo("input_fifo");
  auto r = read_regular_file(p);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), p + ": not a regular file (a FIFO)");
  // The model readers (GGUF, safetensors, config.json) map files through MappedFile.
  auto m = MappedFile::open(p);
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(contains(m.status(), "not a regular file (a FIFO)")) << m.status().message();
}

TEST(InputFile, SymlinkToFifoIsRefused) {
  ScopedAlarm alarm;
  const std::string fifo = make_fifo("input_fifo_target");
  const std::string link = temp_dir() + "/input_fifo_link";
  ::unlink(link.c_str());
  ASSERT_EQ(::symlink(fifo.c_str(), link.c_str()), 0);
  auto r = read_regular_file(link);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), link + ": not a regular file (a FIFO)");
}

TEST(InputFile, DirectoryDeviceAndMissingAreNamed) {
  const std::string dir = temp_dir() + "/input_dir";
  fs::create_directories(dir);
  auto d = read_regular_file(dir);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().message(), dir + ": is a directory, expected a file");
  auto m = MappedFile::open(dir);
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(contains(m.status(), "is a directory")) << m.status().message();

  auto n = read_regular_file("/dev/null");
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().message(), "/dev/null: not a regular file (a character device)");

  auto missing = read_regular_file(dir + "/nope.txt");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), dir + "/nope.txt: no such file");

  const std::string dangling = dir + "/dangling";
  ::unlink(dangling.c_str());
  ASSERT_EQ(::symlink("nowhere", dangling.c_str()), 0);
  auto dl = read_regular_file(dangling);
  ASSERT_FALSE(dl.ok());
  EXPECT_EQ(dl.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(contains(dl.status(), "a symbolic link to a missing file")) << dl.status().message();
}

TEST(InputFile, SizeLimit) {
  const std::string p = test::write_temp_file("input_big.txt", std::string(100, 'x'));
  auto r = read_regular_file(p, 99);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(contains(r.status(), "limit")) << r.status().message();
  EXPECT_TRUE(read_regular_file(p, 100).ok());
}

TEST(InputFile, TypeNames) {
  EXPECT_EQ(file_type_name(S_IFIFO), "a FIFO");
  EXPECT_EQ(file_type_name(S_IFDIR), "a directory");
  EXPECT_EQ(file_type_name(S_IFCHR), "a character device");
  EXPECT_EQ(file_type_name(S_IFBLK), "a block device");
  EXPECT_EQ(file_type_name(S_IFSOCK), "a socket");
  EXPECT_EQ(file_type_name(S_IFREG), "a regular file");
}

}  // namespace
}  // namespace rinfer
