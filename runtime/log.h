// kiln's one logger. Level from KILN_LOG=debug|info|warn|error|off (default warn).
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
