// Philox4x32-10, the counter-based generator of Salmon et al., "Parallel random
// numbers: as easy as 1, 2, 3" (SC'11), which torch's CUDA and CPU dropout and
// JAX use. A counter-based generator draws the n-th random number from (key,
// n) alone, without state passed from the (n-1)-th: eager kernels, JIT kernels
// and any split of the elements across threads give the same numbers for the
// same seed (what training-mode dropout needs, issue 18). Checked against the
// Random123 distribution's known-answer vectors (test/unit/philox_test.cpp).
#pragma once

#include <array>
#include <cstdint>

namespace kiln::philox {

using Counter = std::array<uint32_t, 4>;
using Key = std::array<uint32_t, 2>;

namespace detail {
inline constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;   // the round multipliers
inline constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u; // the key schedule's increments

inline Counter round(const Counter &c, const Key &k) {
  const uint64_t p0 = uint64_t(kMul0) * c[0], p1 = uint64_t(kMul1) * c[2];
  return {uint32_t(p1 >> 32) ^ c[1] ^ k[0], uint32_t(p1), uint32_t(p0 >> 32) ^ c[3] ^ k[1], uint32_t(p0)};
}
} // namespace detail

// Ten rounds, the key bumped between them.
inline Counter philox4x32_10(Counter c, Key k) {
  for (int r = 0; r < 10; ++r) {
    if (r > 0) k = {k[0] + detail::kWeyl0, k[1] + detail::kWeyl1};
    c = detail::round(c, k);
  }
  return c;
}

// A float in [0, 1) from the top 24 bits of a word: every value a multiple of
// 2^-24, so exactly representable in float32 (never rounded up to 1).
inline float unit_float(uint32_t bits) { return float(bits >> 8) * 0x1p-24f; }

// The index-th uniform float in [0, 1) of the stream (seed, offset): word
// index % 4 of the block at counter (index / 4, offset), key seed (block_at).
// A kernel that needs 4 consecutive numbers takes one block.
inline Counter block_at(uint64_t seed, uint64_t offset, uint64_t block) {
  return philox4x32_10({uint32_t(block), uint32_t(block >> 32), uint32_t(offset), uint32_t(offset >> 32)},
                       {uint32_t(seed), uint32_t(seed >> 32)});
}
inline float uniform_at(uint64_t seed, uint64_t offset, uint64_t index) {
  return unit_float(block_at(seed, offset, index / 4)[index % 4]);
}

} // namespace kiln::philox
