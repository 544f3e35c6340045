// Argument checks shared by the composites (composite.cpp, composite_nn.cpp) and
// attention.cpp: each names the function at fault.
#pragma once

#include <limits>
#include <string_view>

#include "runtime/tensor.h"

namespace kiln::detail {

// "<op>: expected a floating-point <what>, got int64 (shape [3])"; what = "tensor" or the argument.
inline void check_float(const Tensor &x, const char *op, const char *what = "tensor") {
  check_defined(x, op, std::string_view(what) == "tensor" ? "self" : what);
  KILN_CHECK(x.is_floating_point(), op, ": expected a floating-point ", what, ", got ", x.dtype(), " (shape ",
             shape_str(x.sizes()), ")");
}

inline void check_not_bool(const Tensor &x, const char *op) {
  check_defined(x, op, "self");
  KILN_CHECK(x.dtype() != kBool, op, ": not supported on bool tensors (shape ", shape_str(x.sizes()), ")");
}

// torch.finfo(t).max and .eps of a floating dtype.
// The input dtypes of the pooling kernels (runtime/kernels/pool.cpp): floats and
// int64, and int32 for max pooling. The 1-D forms check it under their own name.
inline void check_pool_dtype(const Tensor &x, const char *op, bool allow_int32) {
  const DType t = x.dtype();
  const bool ok = is_floating(t) || t == kInt64 || (allow_int32 && t == kInt32);
  KILN_CHECK(ok, op, ": input dtype ", t, " is not supported");
}

inline double finfo_max(DType t) {
  switch (t) {
  case kFloat16: return 65504.0;
  case kBFloat16: return double(float(BFloat16::from_bits(0x7F7F)));
  case kFloat32: return double(std::numeric_limits<float>::max());
  default: return std::numeric_limits<double>::max();
  }
}
inline double finfo_eps(DType t) {
  switch (t) {
  case kFloat16: return 0x1p-10;
  case kBFloat16: return 0x1p-7;
  case kFloat32: return double(std::numeric_limits<float>::epsilon());
  default: return std::numeric_limits<double>::epsilon();
  }
}

// Whether `from` broadcasts to exactly `to` (numpy rules, trailing dims aligned).
inline bool broadcasts_to(IntArrayRef from, IntArrayRef to) {
  if (from.size() > to.size()) return false;
  const size_t lead = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i)
    if (from[i] != 1 && from[i] != to[lead + i]) return false;
  return true;
}

} // namespace kiln::detail
