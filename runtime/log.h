// kiln's one logger. Every layer logs through kiln::log() so that KILN_LOG
// (debug | info | warn | error | off; default warn) controls the whole library.
#pragma once

namespace spdlog {
class logger;
}

namespace kiln {

// The process-wide spdlog logger named "kiln" (stderr). Created on first use.
spdlog::logger &log();

} // namespace kiln
