// The 16-bit floats: kiln::Half (IEEE binary16) and kiln::BFloat16 (the top half of
// a float32). They are storage types, as in torch's CPU kernels: ops load them as
// float32, compute in float32 and round the result once (runtime/trace_hook.h).
// Conversions round to nearest even; a NaN becomes the quiet NaN of its sign.
#pragma once

#include <bit>
#include <cstdint>

namespace kiln {

namespace detail {

constexpr uint16_t float_to_bf16_bits(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((u >> 16) | 0x0040u); // NaN: quieted, sign and top payload kept
  // Round to nearest even on the 16 dropped bits: add 0x7FFF, plus one when the kept part is odd.
  return uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
constexpr float bf16_bits_to_float(uint16_t b) { return std::bit_cast<float>(uint32_t(b) << 16); }

constexpr uint16_t float_to_half_bits(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return sign | uint16_t(0x7E00u | ((a >> 13) & 0x3FFu)); // NaN: quieted, top payload kept
  if (a >= 0x477FF000u) return sign | 0x7C00u; // >= 65520 (half-way past 65504) rounds to inf
  if (a >= 0x38800000u) {                      // a normal half (>= 2^-14): rebias 127 -> 15, round 13 bits
    const uint32_t m = a - 0x38000000u;
    return sign | uint16_t((m + 0xFFFu + ((m >> 13) & 1u)) >> 13);
  }
  // A subnormal half: n units of 2^-24, n = mantissa * 2^(e - 126) rounded to even.
  // (n = 1024 is the smallest normal, whose bits are the same number.)
  const uint32_t e = a >> 23;
  const uint32_t shift = 126u - e; // >= 14
  if (shift > 24u) return sign;    // below half of 2^-24
  const uint32_t mant = (a & 0x7FFFFFu) | 0x800000u;
  uint32_t n = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (n & 1u))) ++n;
  return sign | uint16_t(n);
}

constexpr float half_bits_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  if (e == 0x1Fu) return std::bit_cast<float>(sign | 0x7F800000u | (m << 13)); // inf, NaN
  if (e != 0) return std::bit_cast<float>(sign | ((e + 112u) << 23) | (m << 13));
  const float v = float(m) * (1.0f / 16777216.0f); // subnormal or zero: m units of 2^-24, exact
  return sign ? -v : v;
}

} // namespace detail

// One storage type per format; they differ only in their two conversions.
enum class Float16Format : uint8_t { IEEE, Brain };

template <Float16Format F> struct Float16Storage {
  uint16_t x = 0;
  Float16Storage() = default;
  constexpr Float16Storage(float f)
      : x(F == Float16Format::IEEE ? detail::float_to_half_bits(f) : detail::float_to_bf16_bits(f)) {}
  constexpr operator float() const {
    return F == Float16Format::IEEE ? detail::half_bits_to_float(x) : detail::bf16_bits_to_float(x);
  }
  static constexpr Float16Storage from_bits(uint16_t b) {
    Float16Storage h;
    h.x = b;
    return h;
  }
};

using Half = Float16Storage<Float16Format::IEEE>;
using BFloat16 = Float16Storage<Float16Format::Brain>;

template <class T> inline constexpr bool is_reduced_float_v = false;
template <Float16Format F> inline constexpr bool is_reduced_float_v<Float16Storage<F>> = true;

} // namespace kiln
