// PyTorch checkpoint reader robustness: every truncation of each fixture fails cleanly, and
// corrupted bytes anywhere (pickle, zip records, storage data) either parse into something
// self-consistent or fail with a message naming the file; never a crash, hang or huge allocation
// (run under ASan+UBSan, which also caps allocations below).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "core/mapped_file.h"
#include "formats/torch_checkpoint.h"
#include "test_util.h"

// Under ASan, allocations over 512 MB are reported as errors (tests/asan_limits.cpp), so the
// readers must check declared sizes against the input before allocating.

namespace rinfer {
namespace {

const char* const kFixtures[] = {"sd_zip.pt",        "sd_legacy.pt", "sd_proto4.pt",
                                 "module_legacy.pt", "permuted.pt",  "v3.pt"};

std::string fixture(const std::string& name) {
  std::ifstream f(test::test_data_path("torch/" + name), std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

Result<TorchCheckpoint> parse(std::string bytes, const std::string& name) {
  return TorchCheckpoint::parse(MappedFile::from_bytes(name, std::move(bytes)));
}

// Touches every byte a successful parse hands out and checks it is self-consistent.
void check_consistent(const TorchCheckpoint& c) {
  const MappedFile& m = *c.file();
  for (const TorchTensor& t : c.tensors()) {
    ASSERT_EQ(c.find(t.name), &t);
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      ASSERT_GE(d, 0);
      numel *= static_cast<uint64_t>(d);
    }
    ASSERT_EQ(numel, t.numel);
    ASSERT_EQ(t.nbytes, t.numel * static_cast<uint64_t>(dtype_traits(t.dtype).block_bytes));
    if (!t.copied && t.nbytes > 0) {
      ASSERT_GE(t.data, m.data());
      ASSERT_LE(t.data + t.nbytes, m.data() + m.size());
    }
    uint64_t sum = 0;
    for (uint64_t i = 0; i < t.nbytes; ++i) sum += t.data[i];
    (void)sum;
  }
}

TEST(TorchCheckpointFuzz, EveryTruncationFails) {
  for (const char* name : kFixtures) {
    SCOPED_TRACE(name);
    const std::string bytes = fixture(name);
    ASSERT_GT(bytes.size(), 1000u);
    Result<TorchCheckpoint> full = parse(bytes, "full.pt");
    ASSERT_TRUE(full.ok()) << full.status().to_string();
    check_consistent(*full);
    for (size_t len = 0; len < bytes.size(); ++len) {
      Result<TorchCheckpoint> r = parse(bytes.substr(0, len), "trunc.pt");
      ASSERT_FALSE(r.ok()) << "prefix of " << len << " bytes parsed";
      EXPECT_EQ(r.status().message().rfind("trunc.pt: ", 0), 0u) << r.status().message();
    }
  }
}

TEST(TorchCheckpointFuzz, RandomByteFlips) {
  for (const char* name : kFixtures) {
    SCOPED_TRACE(name);
    const std::string bytes = fixture(name);
    int parsed = 0;
    for (uint64_t seed = 0; seed < 1500; ++seed) {
      std::mt19937_64 rng(seed);
      std::string b = bytes;
      const int flips = 1 + static_cast<int>(rng() % 4);
      for (int i = 0; i < flips; ++i) {
        const uint64_t pos = rng() % b.size();
        b[pos] = static_cast<char>(b[pos] ^ static_cast<char>(1 + rng() % 255));
      }
      Result<TorchCheckpoint> r = parse(std::move(b), "flip.pt");
      if (r.ok()) {
        ++parsed;
        check_consistent(*r);
      } else {
        EXPECT_EQ(r.status().message().rfind("flip.pt: ", 0), 0u) << r.status().message();
      }
      if (testing::Test::HasFatalFailure()) FAIL() << "seed " << seed;
    }
    // Flips inside storage bytes still parse; most others do not.
    std::printf("%s: %d of 1500 corrupted files parsed\n", name, parsed);
    EXPECT_GT(parsed, 0);
    EXPECT_LT(parsed, 1500);
  }
}

TEST(TorchCheckpointFuzz, EveryByteSetToExtremes) {
  // A length, count, offset or opcode set to 0x00, 0x7f, 0x80 or 0xff must be caught by the
  // checks before anything is allocated or read for it.
  for (const char* name : kFixtures) {
    SCOPED_TRACE(name);
    const std::string bytes = fixture(name);
    for (size_t pos = 0; pos < bytes.size(); ++pos) {
      for (unsigned char v : {0x00, 0x01, 0x7f, 0x80, 0xff}) {
        std::string b = bytes;
        if (static_cast<unsigned char>(b[pos]) == v) continue;
        b[pos] = static_cast<char>(v);
        Result<TorchCheckpoint> r = parse(std::move(b), "x.pt");
        if (r.ok()) check_consistent(*r);
        if (testing::Test::HasFatalFailure()) FAIL() << "byte " << pos << " = " << int{v};
      }
    }
  }
}

TEST(TorchCheckpointFuzz, RandomPicklesAfterTheLegacyHeader) {
  // Random opcode soup where the state dict pickle goes: always a clean error.
  const std::string legacy = fixture("sd_legacy.pt");
  const std::string head = legacy.substr(0, 137);  // magic, protocol, sys info
  ASSERT_EQ(static_cast<unsigned char>(legacy[137]), 0x80);
  const std::string ops = "()]}NKJMXhjqrtu\x85\x86\x87\x88\x89sabeRQ.\x8a\x8c\x93\x94\x95";
  for (uint64_t seed = 0; seed < 3000; ++seed) {
    std::mt19937_64 rng(seed);
    std::string b = head + "\x80\x02";
    const size_t n = 1 + rng() % 300;
    for (size_t i = 0; i < n; ++i) {
      b.push_back(rng() % 3 == 0 ? static_cast<char>(rng() % 256) : ops[rng() % ops.size()]);
    }
    Result<TorchCheckpoint> r = parse(std::move(b), "soup.pt");
    if (r.ok()) {
      check_consistent(*r);
    } else {
      EXPECT_EQ(r.status().message().rfind("soup.pt: ", 0), 0u) << r.status().message();
    }
    if (testing::Test::HasFatalFailure()) FAIL() << "seed " << seed;
  }
}

}  // namespace
}  // namespace rinfer
