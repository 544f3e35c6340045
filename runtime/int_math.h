// Integer helpers shared by kernels and the IR's size arithmetic.
#pragma once

#include <type_traits>

namespace kiln {

// a / b rounded toward negative infinity (Python's //, torch's floor division),
// for any integer type and either sign; b != 0, and not INT_MIN / -1.
template <class T> constexpr T div_floor(T a, T b) {
  static_assert(std::is_integral_v<T>);
  return T(a / b - T((a % b != 0) && ((a < 0) != (b < 0))));
}

} // namespace kiln
