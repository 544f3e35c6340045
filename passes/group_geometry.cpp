#include "passes/group_geometry.h"

#include <algorithm>

namespace kiln::passes {

std::vector<int64_t> reduced_dims(const ir::Node &n) {
  int64_t rank = int64_t(n.operand(0)->type().shape.size());
  std::vector<int64_t> dims;
  if (const AttrValue *a = n.attr("dims"); a && a->is_ints())
    for (int64_t d : a->as_ints()) dims.push_back(d < 0 ? d + rank : d);
  if (dims.empty())
    for (int64_t d = 0; d < rank; ++d) dims.push_back(d);
  std::sort(dims.begin(), dims.end());
  dims.erase(std::unique(dims.begin(), dims.end()), dims.end());
  return dims;
}

bool is_row_shape(IntArrayRef s, IntArrayRef d, const std::vector<int64_t> &red) {
  if (d.empty() || red.empty()) return false;
  Dims keep(d), dropped;
  for (int64_t r : red) keep[size_t(r)] = 1;
  for (size_t i = 0; i < d.size(); ++i)
    if (!std::binary_search(red.begin(), red.end(), int64_t(i))) dropped.push_back(d[i]);
  return s == IntArrayRef(keep) || s == IntArrayRef(dropped);
}

bool dropped_row_misaligned(IntArrayRef d, const std::vector<int64_t> &red) {
  size_t i = 0; // position among the kept dims
  for (size_t dim = 0; dim < d.size(); ++dim) {
    if (std::binary_search(red.begin(), red.end(), int64_t(dim))) continue;
    if (d[dim] != 1 && dim != red.size() + i) return true;
    ++i;
  }
  return false;
}

std::vector<int64_t> broadcast_strides(IntArrayRef s, IntArrayRef st, IntArrayRef domain) {
  std::vector<int64_t> out(domain.size(), 0);
  size_t off = domain.size() - s.size();
  for (size_t i = 0; i < s.size(); ++i)
    if (s[i] != 1) out[off + i] = st[i];
  return out;
}

} // namespace kiln::passes
