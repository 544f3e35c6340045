// kiln's one logger. Level from KILN_LOG=trace|debug|info|warn|error|critical|off
// (default warn; an unknown value logs one warning naming it and the valid ones).
// The header does not include spdlog: the library's .cpp files include
// <spdlog/spdlog.h> and call kiln::log()->warn(...).
#pragma once

namespace spdlog {
class logger;
}

namespace kiln {

spdlog::logger *log();
// Re-reads KILN_LOG (tests set it and call this).
void reload_log_level();

} // namespace kiln
