#include "runtime/log.h"

#include <cstdlib>
#include <optional>
#include <string>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace kiln {
namespace {

constexpr const char *kValidLevels = "trace, debug, info, warn, error, critical, off";

// The level KILN_LOG names, or nullopt for an unknown name (spdlog's from_str
// maps unknown names to "off": a typo must not silence warnings).
std::optional<spdlog::level::level_enum> level_named(const std::string &v) {
  auto lvl = spdlog::level::from_str(v); // also takes "warning", "err"
  if (lvl == spdlog::level::off && v != "off") return std::nullopt;
  return lvl;
}

// Sets the level from KILN_LOG (default warn); an unknown value keeps warn and says so, once per read.
void apply_env_level(spdlog::logger &logger) {
  const char *v = std::getenv("KILN_LOG");
  std::optional<spdlog::level::level_enum> lvl = v && *v ? level_named(v) : spdlog::level::warn;
  logger.set_level(lvl.value_or(spdlog::level::warn));
  if (!lvl) logger.warn("KILN_LOG={} is not a log level ({}); using warn", v, kValidLevels);
}

std::shared_ptr<spdlog::logger> make_logger() {
  // Another part of the process may have registered "kiln" already: share it.
  if (auto existing = spdlog::get("kiln")) return existing;
  auto logger = spdlog::stderr_color_mt("kiln");
  logger->set_pattern("[kiln] [%l] %v");
  apply_env_level(*logger);
  return logger;
}

} // namespace

spdlog::logger *log() {
  static std::shared_ptr<spdlog::logger> logger = make_logger();
  return logger.get();
}

void reload_log_level() { apply_env_level(*log()); }

} // namespace kiln
