// torch's C++ indexing API (torch::indexing): x.index({Slice(1, None), idx, None,
// Ellipsis, 0}) and x.index_put_({mask}, 0.0), as libtorch code writes them.
//
// Integers select (the dim goes away), slices slice, None inserts a dim of size 1,
// Ellipsis stands for the dims no other entry takes, true / false insert a dim of size
// 1 / 0: all views of x (Tensor::select, slice, unsqueeze). Tensors index: int64 or
// int32 tensors broadcast together and pick elements along the dims they stand in (the
// result's dims of the index shape replace those dims where the tensors are adjacent,
// and come first otherwise, as in torch); a bool tensor stands for the k dims it covers
// and indexes by its nonzero() positions (its shape must match theirs). A bool index
// makes the result's shape depend on values: eager only, reported while tracing as
// nonzero is, except index_put_ of one value through one mask (x.index_put_({mask},
// 0.0)), which is torch's where(mask, value, x) and traces and fuses as that.
#pragma once

#include <cstdint>
#include <optional>
#include <variant>

#include "runtime/tensor.h"

namespace kiln::indexing {

// A slice [start, stop) with a positive step; an absent bound is the dim's start or end.
struct Slice {
  Slice(std::optional<int64_t> start = std::nullopt, std::optional<int64_t> stop = std::nullopt,
        std::optional<int64_t> step = std::nullopt)
      : start(start), stop(stop), step(step) {}
  std::optional<int64_t> start, stop, step;
};

struct EllipsisIndexType {};
inline constexpr EllipsisIndexType Ellipsis{};
inline constexpr std::nullopt_t None = std::nullopt;

// One entry of an index list (torch::indexing::TensorIndex).
class TensorIndex {
public:
  TensorIndex(std::nullopt_t) : v_(std::monostate{}) {}
  TensorIndex(EllipsisIndexType) : v_(EllipsisIndexType{}) {}
  TensorIndex(const char *s); // "...": Ellipsis; anything else is an Error
  TensorIndex(int64_t i) : v_(i) {}
  TensorIndex(int i) : v_(int64_t(i)) {}
  TensorIndex(bool b) : v_(b) {}
  TensorIndex(Slice s) : v_(s) {}
  TensorIndex(Tensor t) : v_(std::move(t)) {}

  bool is_none() const { return std::holds_alternative<std::monostate>(v_); }
  bool is_ellipsis() const { return std::holds_alternative<EllipsisIndexType>(v_); }
  bool is_integer() const { return std::holds_alternative<int64_t>(v_); }
  bool is_boolean() const { return std::holds_alternative<bool>(v_); }
  bool is_slice() const { return std::holds_alternative<Slice>(v_); }
  bool is_tensor() const { return std::holds_alternative<Tensor>(v_); }
  int64_t integer() const { return std::get<int64_t>(v_); }
  bool boolean() const { return std::get<bool>(v_); }
  const Slice &slice() const { return std::get<Slice>(v_); }
  const Tensor &tensor() const { return std::get<Tensor>(v_); }

private:
  std::variant<std::monostate, EllipsisIndexType, int64_t, bool, Slice, Tensor> v_;
};

} // namespace kiln::indexing
