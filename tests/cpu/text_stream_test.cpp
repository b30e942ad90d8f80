// TextStream: stop strings across token boundaries, held-back tails, UTF-8.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/expect_error.h"
#include "engine/text_stream.h"

namespace lowbit::test {
namespace {

using engine::TextStream;

// Feeds the pieces; returns what was shown, piece by piece joined, and the final text.
std::string feed(TextStream& s, const std::vector<std::string>& pieces) {
  std::string shown;
  for (const std::string& p : pieces) shown += s.push(p);
  shown += s.finish();
  EXPECT_EQ(shown, s.text());
  return shown;
}

TEST(TextStream, NoStopsPassesEverything) {
  TextStream s;
  EXPECT_EQ(s.push("Hello"), "Hello");
  EXPECT_EQ(s.push(", world"), ", world");
  EXPECT_EQ(s.finish(), "");
  EXPECT_FALSE(s.stopped());
}

TEST(TextStream, StopInsideOneToken) {
  TextStream s({"END"});
  EXPECT_EQ(feed(s, {"abc", "xxENDyy", "more"}), "abcxx");
  EXPECT_TRUE(s.stopped());
}

TEST(TextStream, StopAcrossTokensIsHeldBackThenDropped) {
  TextStream s({"\n\n"});
  EXPECT_EQ(s.push("line"), "line");
  EXPECT_EQ(s.push("\n"), "");  // could be the start of the stop
  EXPECT_EQ(s.push("\nnext"), "");
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(s.text(), "line");
}

TEST(TextStream, HeldBackTailIsReleasedWhenItCannotMatch) {
  TextStream s({"STOP"});
  EXPECT_EQ(s.push("aST"), "a");
  EXPECT_EQ(s.push("x"), "STx");
  EXPECT_EQ(s.push("STO"), "");
  EXPECT_EQ(s.finish(), "STO");  // the end: nothing more can complete it
  EXPECT_FALSE(s.stopped());
}

TEST(TextStream, EarliestOfSeveralStopsWins) {
  TextStream s({"bb", "ab"});
  EXPECT_EQ(feed(s, {"xa", "bb"}), "x");
}

TEST(TextStream, IncompleteUtf8IsHeldBack) {
  TextStream s;
  const std::string euro = "\xe2\x82\xac";  // U+20AC in three bytes
  EXPECT_EQ(s.push(euro.substr(0, 1)), "");
  EXPECT_EQ(s.push(euro.substr(1, 1)), "");
  EXPECT_EQ(s.push(euro.substr(2) + "!"), euro + "!");
  EXPECT_EQ(engine::incomplete_utf8_tail("a\xf0\x9f\x98"), 3u);
  EXPECT_EQ(engine::incomplete_utf8_tail("a\xf0\x9f\x98\x80"), 0u);
  EXPECT_EQ(engine::incomplete_utf8_tail("abc"), 0u);
  EXPECT_EQ(engine::incomplete_utf8_tail("\xc3"), 1u);
}

TEST(TextStream, EmptyStopIsRefused) {
  EXPECT_LOWBIT_ERROR(TextStream({"a", ""}), "stop[1]: empty stop string");
}

}  // namespace
}  // namespace lowbit::test
