// Stop strings over streamed text. Generated text arrives in pieces; a stop string may span
// several of them. push() returns the text that is safe to show now and holds back the
// longest tail that could still be the start of a stop string, so a streaming client never
// sees a partial stop string. Once one matches, the text before it is released, the stop
// string and everything after it are dropped, and stopped() is true.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace rinfer {

class StopStringFilter {
 public:
  StopStringFilter() = default;
  // Empty strings are ignored.
  explicit StopStringFilter(std::vector<std::string> stops);

  // Adds a piece; returns the text released by it (possibly empty). After a match, returns
  // only the text before the stop string, and "" for every later piece.
  std::string push(std::string_view piece);
  // End of the stream: releases the held-back text (nothing once stopped).
  std::string flush();

  bool stopped() const { return stopped_; }
  // The stop string that matched ("" if none).
  const std::string& matched() const { return matched_; }
  // Bytes currently held back.
  size_t held() const { return pending_.size(); }
  void reset();

 private:
  std::vector<std::string> stops_;
  std::string pending_;  // text not released yet
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace rinfer
