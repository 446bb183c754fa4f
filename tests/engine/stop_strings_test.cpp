// Stop strings over streamed pieces: nothing that could start a stop string is shown early.
#include "engine/stop_strings.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace rinfer {
namespace {

// Streams `pieces`; returns what was released per piece (the flush last).
std::vector<std::string> stream(StopStringFilter& f, const std::vector<std::string>& pieces) {
  std::vector<std::string> out;
  for (const std::string& p : pieces) out.push_back(f.push(p));
  out.push_back(f.flush());
  return out;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += x;
  return s;
}

TEST(StopStringsTest, NoStopsPassEverythingThrough) {
  StopStringFilter f;
  EXPECT_EQ(stream(f, {"a", "bc", ""}), (std::vector<std::string>{"a", "bc", "", ""}));
  EXPECT_FALSE(f.stopped());
  StopStringFilter empty_only({""});
  EXPECT_EQ(empty_only.push("xy"), "xy");
}

TEST(StopStringsTest, StopInsideOnePiece) {
  StopStringFilter f({"END"});
  EXPECT_EQ(f.push("Hello END world"), "Hello ");
  EXPECT_TRUE(f.stopped());
  EXPECT_EQ(f.matched(), "END");
  EXPECT_EQ(f.push("more"), "");
  EXPECT_EQ(f.flush(), "");
}

TEST(StopStringsTest, StopAcrossPiecesIsHeldBackUntilDecided) {
  StopStringFilter f({"END"});
  const auto out = stream(f, {"Hel", "lo E", "N", "D!", "after"});
  EXPECT_EQ(out, (std::vector<std::string>{"Hel", "lo ", "", "", "", ""}));
  EXPECT_TRUE(f.stopped());
  // Nothing released ever contains a prefix of the stop string at its end.
  for (const auto& piece : out) EXPECT_EQ(piece.find('E'), std::string::npos);
}

TEST(StopStringsTest, FalseAlarmReleasesTheHeldText) {
  StopStringFilter f({"END"});
  EXPECT_EQ(f.push("a E"), "a ");
  EXPECT_EQ(f.held(), 1u);
  EXPECT_EQ(f.push("N"), "");
  EXPECT_EQ(f.push("x"), "ENx");
  EXPECT_EQ(f.push("EN"), "");
  EXPECT_EQ(f.flush(), "EN");  // end of the stream: released
  EXPECT_FALSE(f.stopped());
}

TEST(StopStringsTest, EarliestMatchWinsThenLongest) {
  StopStringFilter f({"world", "o w", "lo"});
  EXPECT_EQ(f.push("hello world"), "hel");
  EXPECT_EQ(f.matched(), "lo");
  StopStringFilter g({"ab", "abc"});
  EXPECT_EQ(g.push("xxabc"), "xx");
  EXPECT_EQ(g.matched(), "abc");
}

TEST(StopStringsTest, HoldsTheLongestPossiblePrefixOfAnyStop) {
  StopStringFilter f({"<|im_end|>", "\n\nUser:"});
  EXPECT_EQ(f.push("Sure.\n"), "Sure.");
  EXPECT_EQ(f.push("\nUs"), "");
  EXPECT_EQ(f.push("e"), "");
  EXPECT_EQ(f.push("d"), "\n\nUsed");
  EXPECT_EQ(f.push(" it <|im_"), " it ");
  EXPECT_EQ(f.push("end|> trailing"), "");
  EXPECT_TRUE(f.stopped());
  EXPECT_EQ(f.matched(), "<|im_end|>");
}

TEST(StopStringsTest, MultiByteUtf8Stop) {
  StopStringFilter f(
      {"\xE2\x80\x94"
       "END"});  // "—END"
  std::string released = join(stream(f, {"a\xE2\x80", "\x94", "EN", "D tail"}));
  EXPECT_EQ(released, "a");
  EXPECT_TRUE(f.stopped());
}

TEST(StopStringsTest, ResetStartsOver) {
  StopStringFilter f({"x"});
  EXPECT_EQ(f.push("axb"), "a");
  f.reset();
  EXPECT_FALSE(f.stopped());
  EXPECT_EQ(f.push("b"), "b");
}

}  // namespace
}  // namespace rinfer
