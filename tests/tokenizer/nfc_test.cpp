// NFC (src/tokenizer/nfc.h, utf8proc) against Python's unicodedata.normalize on the goldens
// (tests/tools/gen_nfc_goldens.py), a few cases by hand, and the cheap pre-test.
#include "tokenizer/nfc.h"

#include <gtest/gtest.h>

#include "golden_fixture.h"
#include "tokenizer/unicode.h"

namespace rinfer {
namespace {

TEST(Nfc, MatchesPythonOnTheGoldens) {
  const auto& g = test::goldens("nfc_goldens.json");
  const auto& pairs = g["pairs"];
  ASSERT_GT(pairs.size(), 6000u);
  int failures = 0;
  for (const auto& p : pairs) {
    const std::string in = p[0].get<std::string>(), want = p[1].get<std::string>();
    const std::string got = unicode::nfc(in);
    if (got != want && failures++ < 10) {
      ADD_FAILURE() << "nfc of '" << in << "' gave '" << got << "', want '" << want << "'";
    }
    // NFC is idempotent, and text that may not need it is left as it is.
    EXPECT_EQ(unicode::nfc(want), want);
    if (!unicode::may_need_nfc(in)) EXPECT_EQ(in, want);
  }
  EXPECT_EQ(failures, 0);
}

TEST(Nfc, ComposesReordersAndKeepsExclusions) {
  EXPECT_EQ(unicode::nfc("e\xCC\x81"), "\xC3\xA9");  // e + U+0301 -> é
  // a + dot below (220) + circumflex (230) in either order -> ậ (U+1EAD)
  EXPECT_EQ(unicode::nfc("a\xCC\x82\xCC\xA3"), "\xE1\xBA\xAD");
  EXPECT_EQ(unicode::nfc("a\xCC\xA3\xCC\x82"), "\xE1\xBA\xAD");
  EXPECT_EQ(unicode::nfc("\xE2\x84\xAB"), "\xC3\x85");  // U+212B ANGSTROM SIGN -> U+00C5
  // U+0958 (a composition exclusion) decomposes and stays decomposed.
  EXPECT_EQ(unicode::nfc("\xE0\xA5\x98"), "\xE0\xA4\x95\xE0\xA4\xBC");
  // Hangul jamo L V T -> one syllable (U+AC01).
  EXPECT_EQ(unicode::nfc("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8"), "\xEA\xB0\x81");
  // Invalid UTF-8 stays byte for byte and ends a run.
  EXPECT_EQ(unicode::nfc("e\xFF\xCC\x81"), "e\xFF\xCC\x81");
  EXPECT_EQ(unicode::nfc("e\xCC\x81\xFF"), "\xC3\xA9\xFF");
  EXPECT_EQ(unicode::nfc(""), "");
  EXPECT_FALSE(unicode::may_need_nfc("plain ASCII and caf\xC3\xA9"));
  EXPECT_TRUE(unicode::may_need_nfc("e\xCC\x81"));
}

}  // namespace
}  // namespace rinfer
