// INTERNAL to frontend/compile.cpp: values computed from captured tensors and
// constants alone (inference batch norm's rsqrt(running_var + eps) * weight, a
// causal mask) are computed once per specialization instead of in every call,
// and again only when one of those captured tensors is updated in place (its
// version counter, kiln::tensor_version, moved: an in-place op or data_ptr()).
// Tensors over from_blob memory are never sources: the user writes them without ops.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "ir/graph.h"
#include "runtime/tensor.h"
#include "runtime/version.h"

namespace kiln::detail {

class ParamFold {
public:
  // Moves every value of `g` (an optimized graph, memory plan included) that
  // depends only on parameters and constants and takes some work (not a mere
  // view of a parameter) into a prologue graph; `g` reads each such value as
  // a new parameter holding its current value. Null when there is none, or
  // when `g` updates tensors in place (a write-back would change a parameter
  // in the middle of the call). Re-plans g's memory if it had a plan.
  static std::unique_ptr<ParamFold> extract(ir::Graph &g);

  // Recomputes the held values if a parameter they read was updated in place
  // since they were computed. Thread-safe; a lock only when recomputing.
  void refresh() const {
    for (size_t i = 0; i < sources_.size(); ++i)
      if (sources_[i].version->load(std::memory_order_acquire) != seen_[i].load(std::memory_order_acquire))
          [[unlikely]]
        return recompute();
  }

  size_t values() const { return holders_.size(); }
  size_t nodes() const { return nodes_; }
  int64_t recomputes() const { return recomputes_.load(std::memory_order_relaxed); }

private:
  ParamFold() = default;
  void recompute() const;
  void compute_locked() const;

  struct Source {
    Tensor live;                    // keeps the storage (and so its counter) alive
    detail::VersionCounter version; // live's storage's: a captured tensor keeps its storage
  };
  std::unique_ptr<ir::Graph> prologue_; // params: the sources; outputs: the held values
  std::vector<Source> sources_;         // every captured tensor the prologue reads
  std::vector<Tensor> holders_;         // per prologue output: the parameter g reads instead
  size_t nodes_ = 0;                    // nodes moved out of g
  mutable std::unique_ptr<std::atomic<uint64_t>[]> seen_; // per source: its version when last computed
  mutable std::mutex mu_;
  mutable std::atomic<int64_t> recomputes_{0};
};

} // namespace kiln::detail
