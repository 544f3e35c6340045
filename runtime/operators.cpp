// Tensor operators, with torch's meaning.
#include "runtime/ops.h"

namespace kiln {

Tensor operator+(const Tensor &a, const Tensor &b) { return add(a, b); }
Tensor operator-(const Tensor &a, const Tensor &b) { return sub(a, b); }
Tensor operator*(const Tensor &a, const Tensor &b) { return mul(a, b); }
Tensor operator/(const Tensor &a, const Tensor &b) { return div(a, b); }
Tensor operator+(const Tensor &a, const Scalar &b) { return add(a, b); }
Tensor operator-(const Tensor &a, const Scalar &b) { return sub(a, b); }
Tensor operator*(const Tensor &a, const Scalar &b) { return mul(a, b); }
Tensor operator/(const Tensor &a, const Scalar &b) { return div(a, b); }
Tensor operator+(const Scalar &a, const Tensor &b) { return add(b, a); }
Tensor operator-(const Scalar &a, const Tensor &b) { return add(neg(b), a); }
Tensor operator*(const Scalar &a, const Tensor &b) { return mul(b, a); }
Tensor operator/(const Scalar &a, const Tensor &b) { return div(detail::wrap_scalar(a), b); }
Tensor operator-(const Tensor &a) { return neg(a); }
Tensor operator==(const Tensor &a, const Tensor &b) { return eq(a, b); }
Tensor operator!=(const Tensor &a, const Tensor &b) { return ne(a, b); }
Tensor operator<(const Tensor &a, const Tensor &b) { return lt(a, b); }
Tensor operator<=(const Tensor &a, const Tensor &b) { return le(a, b); }
Tensor operator>(const Tensor &a, const Tensor &b) { return gt(a, b); }
Tensor operator>=(const Tensor &a, const Tensor &b) { return ge(a, b); }
Tensor operator==(const Tensor &a, const Scalar &b) { return eq(a, b); }
Tensor operator!=(const Tensor &a, const Scalar &b) { return ne(a, b); }
Tensor operator<(const Tensor &a, const Scalar &b) { return lt(a, b); }
Tensor operator<=(const Tensor &a, const Scalar &b) { return le(a, b); }
Tensor operator>(const Tensor &a, const Scalar &b) { return gt(a, b); }
Tensor operator>=(const Tensor &a, const Scalar &b) { return ge(a, b); }
Tensor &operator+=(Tensor &a, const Tensor &b) { return add_(a, b); }
Tensor &operator-=(Tensor &a, const Tensor &b) { return sub_(a, b); }
Tensor &operator*=(Tensor &a, const Tensor &b) { return mul_(a, b); }
Tensor &operator/=(Tensor &a, const Tensor &b) { return div_(a, b); }
Tensor &operator+=(Tensor &a, const Scalar &b) { return add_(a, b); }
Tensor &operator-=(Tensor &a, const Scalar &b) { return sub_(a, b); }
Tensor &operator*=(Tensor &a, const Scalar &b) { return mul_(a, b); }
Tensor &operator/=(Tensor &a, const Scalar &b) { return div_(a, b); }

} // namespace kiln
