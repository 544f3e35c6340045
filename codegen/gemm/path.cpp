#include "codegen/gemm/path.h"

#include <atomic>
#include <cstdlib>

#include <spdlog/spdlog.h>

#include "runtime/log.h"

namespace kiln::codegen::gemm {
namespace {

Path from_env() {
  const char *s = std::getenv("KILN_GEMM");
  if (!s || !*s) return Path::Jit;
  if (std::optional<Path> p = parse_path(s)) return *p;
  kiln::log()->warn("KILN_GEMM='{}' is not jit or blas: using jit", s);
  return Path::Jit;
}

std::atomic<Path> &current() {
  static std::atomic<Path> p{from_env()};
  return p;
}

} // namespace

Path path() { return current().load(std::memory_order_relaxed); }
void set_path(Path p) { current().store(p, std::memory_order_relaxed); }

std::string_view path_name(Path p) {
  switch (p) {
  case Path::Jit: return "jit";
  case Path::Blas: return "blas";
  }
  return "?";
}

std::optional<Path> parse_path(std::string_view s) {
  if (s == "jit") return Path::Jit;
  if (s == "blas") return Path::Blas;
  return std::nullopt;
}

} // namespace kiln::codegen::gemm
