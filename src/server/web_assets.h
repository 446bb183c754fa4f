// The chat page's files (web/ in the repository), compiled into the binary by
// cmake/embed_web.cmake so that `rinfer serve` needs nothing beside it.
#pragma once

#include <span>
#include <string_view>

namespace rinfer::server {

struct WebAsset {
  std::string_view path;  // "/index.html"
  std::string_view type;  // "text/html; charset=utf-8"
  std::string_view body;
};

std::span<const WebAsset> web_assets();

}  // namespace rinfer::server
