// core/output_file.h: the one way user-named output files are checked and written. Guards the
// class "writing an output replaces whatever the path was": a device (/dev/null), a FIFO, a
// directory, a dangling symlink, an input file or a path in a missing directory is refused up
// front with the path and its type named, and left as it was; a symlink to a regular file is
// written through (the link survives); an unfinished AtomicFile leaves no temporary file and the
// old content intact.
#include "core/output_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "test_util.h"

namespace rinfer {
namespace {

namespace fs = std::filesystem;

std::string read(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

class OutputFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::path(test::write_temp_file("output_file_anchor", "")).parent_path() /
            "output_file_test")
               .string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path(name), std::ios::binary) << text;
    return path(name);
  }
  // Every entry of the directory: a leftover temporary file would show here.
  size_t entries() const {
    return static_cast<size_t>(std::distance(fs::directory_iterator(dir_), {}));
  }
  std::string dir_;
};

TEST_F(OutputFile, NewAndRegularFilesAreReplacedAtomically) {
  const std::string fresh = path("new.bin");
  ASSERT_TRUE(write_file_atomically(fresh, "first").ok());
  EXPECT_EQ(read(fresh), "first");

  const std::string old = write("old.bin", "old content");
  ASSERT_EQ(::chmod(old.c_str(), 0600), 0);
  auto t = check_output_path(old);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_TRUE(t->exists);
  ASSERT_TRUE(write_file_atomically(old, "new content").ok());
  EXPECT_EQ(read(old), "new content");
  struct stat st {};
  ASSERT_EQ(::stat(old.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);  // the old file's permission bits are kept
  EXPECT_EQ(entries(), 2u);              // no temporary file left
}

TEST_F(OutputFile, UncommittedWriteLeavesTheOldFileAndNoTemp) {
  const std::string old = write("keep.bin", "precious");
  {
    auto f = AtomicFile::create(old);
    ASSERT_TRUE(f.ok()) << f.status().message();
    ASSERT_TRUE(f->write(std::string(1 << 16, 'x')).ok());
    EXPECT_TRUE(fs::exists(f->temp_path()));
    EXPECT_EQ(fs::path(f->temp_path()).parent_path(), fs::path(dir_));
  }  // an error path: destroyed without commit
  EXPECT_EQ(read(old), "precious");
  EXPECT_EQ(entries(), 1u);
}

TEST_F(OutputFile, SymlinkToARegularFileIsWrittenThrough) {
  fs::create_directories(path("sub"));
  const std::string target = write("sub/target.bin", "old");
  const std::string link = path("link.bin");
  ASSERT_EQ(::symlink("sub/target.bin", link.c_str()), 0);
  auto t = check_output_path(link);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(fs::path(t->target), fs::canonical(target));
  ASSERT_TRUE(write_file_atomically(link, "new").ok());
  EXPECT_TRUE(fs::is_symlink(link));  // the link survives
  EXPECT_EQ(fs::read_symlink(link), "sub/target.bin");
  EXPECT_EQ(read(target), "new");
  EXPECT_EQ(std::distance(fs::directory_iterator(path("sub")), {}), 1);  // the temp went there
}

TEST_F(OutputFile, NonRegularOutputsAreRefusedAndKept) {
  const std::string fifo = path("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  const std::string dir = path("a_dir");
  fs::create_directories(dir);
  const std::string dangling = path("dangling");
  ASSERT_EQ(::symlink("missing-target", dangling.c_str()), 0);
  const std::string to_fifo = path("to_fifo");
  ASSERT_EQ(::symlink("fifo", to_fifo.c_str()), 0);

  struct Case {
    std::string path;
    std::string message;
  };
  const Case cases[] = {
      {"/dev/null", "/dev/null: not a regular file (a character device)"},
      {fifo, fifo + ": not a regular file (a FIFO)"},
      {dir, dir + ": is a directory"},
      {dangling, dangling + ": a symbolic link to a missing file ('missing-target')"},
      {to_fifo, "which is not a regular file (a FIFO)"},
      {path("no/such/dir/out.bin"), "the directory '" + path("no/such/dir") + "' does not exist"},
      {write("plain", "x") + "/out.bin", "is not a directory"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.path);
    auto t = check_output_path(c.path);
    ASSERT_FALSE(t.ok());
    EXPECT_NE(t.status().message().find(c.message), std::string::npos) << t.status().message();
    const Status w = write_file_atomically(c.path, "data");
    EXPECT_FALSE(w.ok());
  }
  struct stat st {};
  ASSERT_EQ(::lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));  // untouched
  EXPECT_TRUE(fs::is_directory(dir));
  EXPECT_TRUE(fs::is_symlink(dangling));
  EXPECT_FALSE(fs::exists(path("missing-target")));
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
}

TEST_F(OutputFile, TheInputIsNotAnOutput) {
  const std::string in = write("in.gguf", "input bytes");
  const std::string link = path("in_link.gguf");
  ASSERT_EQ(::symlink("in.gguf", link.c_str()), 0);
  for (const std::string& out : {in, link, dir_ + "/./in.gguf"}) {
    SCOPED_TRACE(out);
    auto t = check_output_path(out, {in});
    ASSERT_FALSE(t.ok());
    EXPECT_NE(t.status().message().find("is the same file as the input '" + in + "'"),
              std::string::npos)
        << t.status().message();
  }
  EXPECT_EQ(read(in), "input bytes");
  EXPECT_TRUE(check_output_path(path("other.gguf"), {in}).ok());
  EXPECT_TRUE(check_output_path(path("other.gguf"), {path("missing-input")}).ok());
}

TEST_F(OutputFile, UnwritableDirectoryIsRefused) {
  if (::geteuid() == 0) GTEST_SKIP() << "root may write in any directory";
  const std::string ro = path("read_only");
  fs::create_directories(ro);
  ASSERT_EQ(::chmod(ro.c_str(), 0555), 0);
  auto t = check_output_path(ro + "/out.bin");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("cannot create files in the directory"), std::string::npos)
      << t.status().message();
  ::chmod(ro.c_str(), 0755);
}

}  // namespace
}  // namespace rinfer
