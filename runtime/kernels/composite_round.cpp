// Rounding toward zero and the fractional part (runtime/ops.h, "composites"): floor for
// the non-negative values and ceil for the negative ones, so that a traced call records
// elementwise ops that fuse (trunc(-0.5) is ceil's -0, as torch's; NaN stays NaN).
#include "runtime/kernels/composite_internal.h"
#include "runtime/ops.h"

namespace kiln {

Tensor trunc(const Tensor &x) {
  detail::check_not_bool(x, "trunc");
  if (!x.is_floating_point()) return clone(x); // integers are whole already (torch's copy)
  return where(lt(x, 0.0), ceil(x), floor(x));
}

Tensor frac(const Tensor &x) {
  detail::check_float(x, "frac");
  return x - trunc(x);
}

Tensor Tensor::trunc() const { return kiln::trunc(*this); }
Tensor Tensor::frac() const { return kiln::frac(*this); }

} // namespace kiln
