// Helpers shared by the unit tests that build KernelDescs and run them through
// the JIT directly (rowreduce_test, rowblock_test, multidim_reduce_test).
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "codegen/jit.h"
#include "codegen/kernel.h"

namespace kiln::test {

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
inline constexpr double kInf = std::numeric_limits<double>::infinity();

// One JIT per test binary: identical kernels compile once.
inline codegen::Jit &test_jit() {
  static codegen::Jit jit;
  return jit;
}

// n values drawn uniformly from [lo, hi) with a fixed seed.
template <class T> std::vector<T> random_values(size_t n, double lo, double hi, uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<T> v(n);
  for (auto &x : v) x = T(d(g));
  return v;
}

template <class T> std::vector<uint8_t> bytes_of(const std::vector<T> &v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size()); // (memcpy from an empty vector's null data is UB)
  return b;
}

template <class T> std::vector<T> values_of(const std::vector<uint8_t> &b) {
  std::vector<T> v(b.size() / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), b.data(), b.size());
  return v;
}

// Runs a compiled kernel on byte buffers (inputs then outputs), returns them.
inline std::vector<std::vector<uint8_t>> run_jit(const codegen::KernelDesc &desc,
                                                 std::vector<std::vector<uint8_t>> bufs) {
  std::vector<void *> p;
  for (auto &b : bufs) p.push_back(b.data());
  test_jit().compile(desc)->run(p.data());
  return bufs;
}

// Lines of `assembly` whose instruction starts with `mnemonic_prefix`; with
// `wide_only`, only those on zmm or ymm registers.
inline int count_lines(const std::string &assembly, const char *mnemonic_prefix, bool wide_only = false) {
  std::istringstream in(assembly);
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    size_t start = line.find_first_not_of(" \t");
    if (start == std::string::npos || line.compare(start, std::strlen(mnemonic_prefix), mnemonic_prefix) != 0)
      continue;
    if (wide_only && line.find("%zmm") == std::string::npos && line.find("%ymm") == std::string::npos) continue;
    ++n;
  }
  return n;
}

} // namespace kiln::test
