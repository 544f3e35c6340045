#include "runtime/log.h"

#include <cstdlib>
#include <memory>
#include <string>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace kiln {
namespace {

spdlog::level::level_enum level_from_env() {
  const char *env = std::getenv("KILN_LOG");
  if (!env || !*env) return spdlog::level::warn;
  auto level = spdlog::level::from_str(env); // unknown names map to "off"
  if (level == spdlog::level::off && std::string(env) != "off") return spdlog::level::warn;
  return level;
}

std::shared_ptr<spdlog::logger> make_logger() {
  // Another part of the process may have registered "kiln" already: share it.
  if (auto existing = spdlog::get("kiln")) return existing;
  auto logger = spdlog::stderr_color_mt("kiln");
  logger->set_level(level_from_env());
  return logger;
}

} // namespace

spdlog::logger &log() {
  static std::shared_ptr<spdlog::logger> logger = make_logger();
  return *logger;
}

} // namespace kiln
