#include "runtime/log.h"

#include <cstdlib>
#include <string>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace kiln {
namespace {

spdlog::level::level_enum level_from_env() {
  const char *v = std::getenv("KILN_LOG");
  if (!v || !*v) return spdlog::level::warn;
  auto lvl = spdlog::level::from_str(v); // "debug", "info", "warn", "error", "off"
  // from_str maps unknown names to "off"; a typo should not silence warnings.
  if (lvl == spdlog::level::off && std::string(v) != "off") return spdlog::level::warn;
  return lvl;
}

std::shared_ptr<spdlog::logger> make_logger() {
  // Another part of the process may have registered "kiln" already: share it.
  if (auto existing = spdlog::get("kiln")) return existing;
  auto logger = spdlog::stderr_color_mt("kiln");
  logger->set_pattern("[kiln] [%l] %v");
  logger->set_level(level_from_env());
  return logger;
}

} // namespace

spdlog::logger *log() {
  static std::shared_ptr<spdlog::logger> logger = make_logger();
  return logger.get();
}

void reload_log_level() { log()->set_level(level_from_env()); }

} // namespace kiln
