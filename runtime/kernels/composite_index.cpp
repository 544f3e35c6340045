// repeat_interleave (runtime/ops.h, "composites"): a scalar count is an expand of a new
// dim after `dim` merged into it; per-element counts become the index list
// [0] * r0 + [1] * r1 + ..., gathered with index_select. The counts are values, read
// on the host: a traced call reads them as item() does (a graph break), as one_hot's
// num_classes -1.
#include <algorithm>
#include <vector>

#include "runtime/kernels/composite_internal.h"
#include "runtime/ops.h"

namespace kiln {
namespace {

const char *kOp = "repeat_interleave";

// [0] * counts[0] + [1] * counts[1] + ... as an int64 tensor (its size checked as any
// tensor's). Made directly, not by a factory op: a traced call takes it as a constant.
Tensor indices_of(const std::vector<int64_t> &counts) {
  int64_t total = 0;
  for (int64_t c : counts)
    KILN_CHECK(!__builtin_add_overflow(total, c, &total), kOp, ": the repeats add up past int64");
  Tensor idx = detail::make_tensor({total}, kInt64);
  int64_t *out = static_cast<int64_t *>(idx.raw_data());
  for (size_t i = 0; i < counts.size(); ++i) out = std::fill_n(out, counts[i], int64_t(i));
  return idx;
}

// The counts of an integer 0-dim or 1-D tensor, on the host.
std::vector<int64_t> read_counts(const Tensor &repeats) {
  detail::check_defined(repeats, kOp, "repeats");
  KILN_CHECK(repeats.dtype() == kInt64 || repeats.dtype() == kInt32, kOp,
             ": repeats must be an int64 or int32 tensor, got ", repeats.dtype());
  KILN_CHECK(repeats.dim() <= 1, kOp, ": repeats must be a 0-dim or 1-D tensor, got shape ",
             shape_str(repeats.sizes()));
  if (repeats.is_meta()) (void)repeats.item(); // reports the read to the tracer and throws
  // Read through its strides, calling no op: while tracing, ops on a captured tensor record
  // nodes and give meta results.
  const char *base = static_cast<const char *>(repeats.raw_data());
  const int64_t n = repeats.numel(), step = repeats.dim() == 0 ? 0 : repeats.stride(0);
  std::vector<int64_t> counts(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t c = repeats.dtype() == kInt64 ? reinterpret_cast<const int64_t *>(base)[i * step]
                                                : reinterpret_cast<const int32_t *>(base)[i * step];
    KILN_CHECK(c >= 0, kOp, ": repeats can not be negative, got ", c);
    counts[size_t(i)] = c;
  }
  return counts;
}

} // namespace

Tensor repeat_interleave(const Tensor &self, int64_t repeats, std::optional<int64_t> dim) {
  detail::check_defined(self, kOp, "self");
  KILN_CHECK(repeats >= 0, kOp, ": repeats can not be negative, got ", repeats);
  Tensor x = dim ? self : flatten(self);
  const int64_t d = dim ? detail::wrap_dim(*dim, std::max<int64_t>(x.dim(), 1), kOp) : 0;
  if (x.dim() == 0) x = reshape(x, {1});
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end()), merged = shape;
  shape.insert(shape.begin() + d + 1, repeats);
  KILN_CHECK(!__builtin_mul_overflow(merged[size_t(d)], repeats, &merged[size_t(d)]), kOp, ": ", repeats,
             " repeats of dim ", d, " of input of shape ", shape_str(self.sizes()), " overflow int64");
  return reshape(expand(unsqueeze(x, d + 1), shape), merged);
}

Tensor repeat_interleave(const Tensor &repeats) {
  detail::check_defined(repeats, kOp, "repeats");
  KILN_CHECK(repeats.dim() == 1, kOp, ": repeat_interleave(repeats) accepts only a 1-D repeats tensor, got shape ",
             shape_str(repeats.sizes()));
  return to(indices_of(read_counts(repeats)), repeats.dtype());
}

Tensor repeat_interleave(const Tensor &self, const Tensor &repeats, std::optional<int64_t> dim) {
  detail::check_defined(self, kOp, "self");
  const std::vector<int64_t> counts = read_counts(repeats);
  if (repeats.dim() == 0 || counts.size() == 1) return repeat_interleave(self, counts[0], dim);
  Tensor x = dim ? self : flatten(self);
  const int64_t d = dim ? detail::wrap_dim(*dim, std::max<int64_t>(x.dim(), 1), kOp) : 0;
  if (x.dim() == 0) x = reshape(x, {1});
  KILN_CHECK( int64_t(counts.size()) == x.size(d), kOp,
             ": repeats must have the same size as input along dim, but got repeats of shape ",
             shape_str(repeats.sizes()), " and input of shape ", shape_str(self.sizes()), " along dim ", d);
  return index_select(x, d, indices_of(counts));
}

Tensor Tensor::repeat_interleave(int64_t repeats, std::optional<int64_t> dim) const {
  return kiln::repeat_interleave(*this, repeats, dim);
}
Tensor Tensor::repeat_interleave(const Tensor &repeats, std::optional<int64_t> dim) const {
  return kiln::repeat_interleave(*this, repeats, dim);
}

} // namespace kiln
