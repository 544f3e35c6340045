// A number passed to an op (alpha, a fill value, a clamp bound), as torch's c10::Scalar.
#pragma once

#include <cstdint>
#include <ostream>
#include <type_traits>

#include "runtime/dtype.h"

namespace kiln {

class Scalar {
public:
  Scalar() : kind_(DType::Int64), i_(0) {}
  Scalar(bool v) : kind_(DType::Bool), i_(v) {}
  template <class T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  Scalar(T v) : kind_(DType::Int64), i_(static_cast<int64_t>(v)) {}
  template <class T, std::enable_if_t<std::is_floating_point_v<T>, int> = 0>
  Scalar(T v) : kind_(DType::Float64), d_(static_cast<double>(v)) {}

  // The dtype a 0-dim tensor made from this scalar gets: bool, int64 or float64.
  DType type() const { return kind_; }
  bool is_floating_point() const { return kind_ == DType::Float64; }
  bool is_integral() const { return kind_ == DType::Int64; }
  bool is_bool() const { return kind_ == DType::Bool; }

  template <class T> T to() const {
    if (kind_ != DType::Float64) return static_cast<T>(i_);
    // A float to an integer narrower than int32 goes through int64, as torch's: -1.0 -> uint8 255.
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool> && sizeof(T) < 4)
      return static_cast<T>(static_cast<int64_t>(d_));
    return static_cast<T>(d_);
  }
  double toDouble() const { return to<double>(); }
  int64_t toLong() const { return to<int64_t>(); }

  friend std::ostream &operator<<(std::ostream &os, const Scalar &s) {
    if (s.kind_ == DType::Float64) return os << s.d_;
    if (s.kind_ == DType::Bool) return os << (s.i_ ? "true" : "false");
    return os << s.i_;
  }
  bool operator==(const Scalar &o) const {
    return kind_ == o.kind_ && (kind_ == DType::Float64 ? d_ == o.d_ : i_ == o.i_);
  }

private:
  DType kind_;
  union {
    int64_t i_;
    double d_;
  };
};

} // namespace kiln
