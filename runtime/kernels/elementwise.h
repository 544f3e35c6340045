// The elementwise family's extra public op (functional copy) and the helpers
// its kernels share (runtime/kernels/elementwise_*.cpp).
#pragma once

#include <vector>

#include "runtime/ops.h"

namespace kiln {

// copy(self, src): a new tensor with self's shape and dtype holding src, broadcast
// and converted (OpId::Copy: the functional form of self.copy_(src) used by tracing).
Tensor copy(const Tensor &self, const Tensor &src);

namespace detail {

// Writes src, broadcast to out's shape and converted to out's dtype, into out
// (which may be non-contiguous). No validation, no tracing: a kernel.
void cast_into(const Tensor &out, const Tensor &src);

// Writes the contiguous float/double NCHW image batch x into dst in
// channels-last order ([N, H, W, C], x.numel() elements). False (nothing
// written) for any other dtype, rank or layout.
bool nchw_to_channels_last_into(const Tensor &x, void *dst);

// Float-only ops promote bool/integer inputs to float32, as torch does.
constexpr DType float_type(DType t) { return is_floating(t) ? t : kFloat32; }

// torch.can_cast: no floating -> integral, no non-bool -> bool.
constexpr bool can_cast(DType from, DType to) {
  if (is_floating(from) && !is_floating(to)) return false;
  return from == kBool || to != kBool;
}

// Throws unless `value` converts to `dtype` without overflow (torch's
// checked_convert): integers need a finite, in-range value; float32 a finite
// value within its range (inf and NaN pass); bool takes anything.
void check_scalar_fits(const Scalar &value, DType dtype, const char *op);

// Throws when a written-to tensor has several elements at one address (a
// broadcast dim: size > 1, stride 0), as torch does.
void check_no_internal_overlap(const Tensor &self, const char *op);

// The in-place rules: `other_shape` broadcasts to exactly self's shape, the
// result dtype can be cast to self's dtype, self has no internal overlap.
void check_inplace(const Tensor &self, IntArrayRef other_shape, DType result, const char *op);

// `other` itself when it is self's exact view or does not share self's memory;
// a contiguous copy when it overlaps self differently (x.add_(x.t())), so the
// in-place kernel never reads an element it already wrote.
Tensor unalias(const Tensor &self, const Tensor &other);

// Adapters: throws "<op>: expected n inputs, got m" instead of indexing past `in`.
void check_num_inputs(const std::vector<Tensor> &in, size_t n, const char *op);

} // namespace detail
} // namespace kiln
