// Philox4x32-10 (runtime/philox.h): the Random123 distribution's known-answer
// vectors (kat_vectors, "philox4x32 10" lines: counter, key, expected output),
// and the properties dropout relies on: any order of evaluation gives the same
// numbers, floats stay in [0, 1), and the stream looks uniform.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

#include "runtime/philox.h"

namespace kiln::philox {
namespace {

TEST(Philox, MatchesTheRandom123KnownAnswers) {
  struct Kat {
    Counter ctr;
    Key key;
    Counter want;
  };
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat &k : kats) EXPECT_EQ(philox4x32_10(k.ctr, k.key), k.want) << std::hex << k.ctr[0];
}

TEST(Philox, UnitFloatsStayBelowOne) {
  EXPECT_EQ(unit_float(0), 0.0f);
  EXPECT_LT(unit_float(0xffffffffu), 1.0f);
  EXPECT_EQ(unit_float(0xffffffffu), 1.0f - 0x1p-24f);
  EXPECT_EQ(unit_float(0x80000000u), 0.5f);
}

TEST(Philox, TheStreamDoesNotDependOnTheOrderOrTheThreads) {
  constexpr int64_t n = 1 << 14;
  std::vector<float> forward(n), chunked(n);
  for (int64_t i = 0; i < n; ++i) forward[size_t(i)] = uniform_at(42, 7, uint64_t(i));
  // Four threads, each over a strided quarter, in reverse.
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int64_t i = n - 1 - t; i >= 0; i -= 4) chunked[size_t(i)] = uniform_at(42, 7, uint64_t(i));
    });
  for (std::thread &th : threads) th.join();
  EXPECT_EQ(forward, chunked);
  // Another seed or offset is another stream.
  int same_seed = 0, same_offset = 0;
  for (int64_t i = 0; i < 1024; ++i) {
    same_seed += forward[size_t(i)] == uniform_at(43, 7, uint64_t(i));
    same_offset += forward[size_t(i)] == uniform_at(42, 8, uint64_t(i));
  }
  EXPECT_LT(same_seed, 3);
  EXPECT_LT(same_offset, 3);
}

TEST(Philox, LooksUniform) {
  // 2^20 draws in 64 bins: chi-square with 63 degrees of freedom has mean 63
  // and standard deviation ~11.2; 130 is six deviations out.
  constexpr int kBins = 64;
  constexpr int64_t n = 1 << 20;
  std::vector<int64_t> bins(kBins, 0);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    float u = uniform_at(2024, 0, uint64_t(i));
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    ++bins[size_t(u * kBins)];
    sum += u;
  }
  const double expect = double(n) / kBins;
  double chi2 = 0;
  for (int64_t b : bins) chi2 += (double(b) - expect) * (double(b) - expect) / expect;
  EXPECT_LT(chi2, 130.0);
  EXPECT_NEAR(sum / double(n), 0.5, 0.002); // the mean's sd is 0.29 / 1024
}

} // namespace
} // namespace kiln::philox
