// Small RAII helpers the unit tests share: restoring the thread count and the
// GEMM path a test changed, and capturing what a call writes to stderr
// (spdlog's default sink).
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

#include <kiln/kiln.h>

#include "codegen/gemm/path.h"

namespace kiln::testing {

// Restores the thread count (and sets `n` threads when given one).
struct ThreadsGuard {
  int saved = get_num_threads();
  ThreadsGuard() = default;
  explicit ThreadsGuard(int n) { set_num_threads(n); }
  ~ThreadsGuard() { set_num_threads(saved); }
};

// Selects the GEMM path for the specializations built while alive.
struct PathGuard {
  gemm::Path saved = gemm::path();
  explicit PathGuard(gemm::Path p) { gemm::set_path(p); }
  ~PathGuard() { gemm::set_path(saved); }
};

// Everything written to file descriptor 2 while fn runs; an exception from fn
// restores stderr and propagates.
inline std::string capture_stderr(const std::function<void()> &fn) {
  std::fflush(stderr);
  char name[] = "/tmp/kiln-test-stderr-XXXXXX";
  int fd = mkstemp(name);
  EXPECT_GE(fd, 0);
  int saved = dup(2);
  dup2(fd, 2);
  auto restore = [&] {
    std::fflush(stderr);
    dup2(saved, 2);
    close(saved);
    close(fd);
  };
  try {
    fn();
  } catch (...) {
    restore();
    unlink(name);
    throw;
  }
  restore();
  std::ifstream in(name);
  std::stringstream ss;
  ss << in.rdbuf();
  unlink(name);
  return ss.str();
}

} // namespace kiln::testing
