#include "tools/output.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>

#include "tools/tools.h"

namespace rinfer {

namespace {

int g_stdout_errno = 0;  // the first failed write's errno (0: none failed)

void note_failure() {
  if (g_stdout_errno == 0) g_stdout_errno = errno != 0 ? errno : EIO;
}

}  // namespace

std::string json_text(const nlohmann::ordered_json& j, int indent) {
  return j.dump(indent, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string json_text(const nlohmann::json& j, int indent) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string count_of(long long n, std::string_view noun, std::string_view plural_noun) {
  std::string out = std::to_string(n) + " ";
  if (n == 1) return out.append(noun);
  return plural_noun.empty() ? out.append(noun).append("s") : out.append(plural_noun);
}

bool write_stdout(std::string_view s) {
  if (g_stdout_errno != 0) return false;
  errno = 0;
  if (std::fwrite(s.data(), 1, s.size(), stdout) != s.size() || std::fflush(stdout) != 0) {
    note_failure();
    return false;
  }
  return true;
}

int check_stdout_written(int exit_code) {
  errno = 0;
  std::cout.flush();
  if (!std::cout) note_failure();
  errno = 0;
  if (std::fflush(stdout) != 0 || std::ferror(stdout) != 0) note_failure();
  if (g_stdout_errno == 0) return exit_code;
  report_error(fmt::format("writing the output to stdout failed: {}", std::strerror(g_stdout_errno)));
  return exit_code != 0 ? exit_code : 1;
}

}  // namespace rinfer
