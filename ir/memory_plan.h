// The memory plan of a graph (written by the plan-memory pass): where each
// intermediate buffer lives in one arena whose size is known at compile time,
// and the liveness rules the pass, the verifier and the executor share.
//
// A planned value is a result of a top-level node that owns fresh memory (not a
// view or other alias of an operand) and never escapes (no graph output aliases
// it). It is live from its producer to the last node that reads it or any view
// of it, or to its write-back (write_back_points). Two planned values may
// share bytes only when their live ranges are disjoint, or when the later one is
// computed in place: an elementwise node (or fusion group, see in_place_ok)
// overwrites an operand it reads for the last time, element for element.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "ir/sym.h"

namespace kiln::ir {

class Graph;
class Node;
class Value;

inline constexpr int64_t kArenaAlignment = 64;

struct BufferAssignment {
  int64_t buffer = 0; // values with the same buffer are computed in place over each other; other buffers
                      // live at different times may share bytes too (overlapping offsets)
  int64_t offset = 0; // from the arena start, a multiple of kArenaAlignment
  int64_t size = 0;   // bytes reserved (>= the value's bytes)
  // A symbolic plan's formulas (MemoryPlan::symbolic); offset and size above
  // are their values at the graph's symbol_hints (the traced sizes).
  SymMax sym_offset;
  SymExpr sym_size;
};

// A graph with symbols (issue 17) gets a symbolic plan: each buffer's offset is
// a formula (the largest end of the buffers live with it and placed before it),
// which the executor evaluates once per call; peak_bytes, offset and size hold
// the formulas' values at the traced sizes.
struct MemoryPlan {
  int64_t peak_bytes = 0; // the arena size
  std::vector<std::pair<Value *, BufferAssignment>> entries; // in definition order
  bool symbolic = false;
  SymMax sym_peak;
  const BufferAssignment *find(const Value *v) const;
};

// The operand whose memory result `result` of `n` may share (views, contiguous,
// a no-op cast, a fusion group returning a view of a body input), or nullptr
// when the result is fresh memory.
Value *alias_source(const Node &n, size_t result);
// Whether `n` may either alias its operand or copy it, depending on strides the
// graph does not fix (reshape, contiguous): its result gets its own slot (used
// when it copies) and also keeps the operand alive (when it is a view).
bool may_copy(const Node &n);

// Where each of g's write-backs runs (in write_backs() order): after the node at
// that index, as soon as its value is computed and no later node reads the
// target's old value (a training step writes each new weight, grad and moment
// into its tensor when it is ready, and its arena bytes serve later values),
// or nodes().size(): after the last node. A write-back stays at the end when
// a graph output or another write-back's value may share the target's memory,
// its value is (a view of) an input, parameter or constant, or its target is
// written back twice. The executor (codegen/executor.cpp) copies at these points.
std::vector<int64_t> write_back_points(const Graph &g);

// Which of g's write-backs compute their value straight into their target's
// memory (in write_backs() order), so that the value needs no arena bytes and
// no copy: the value is a result of a top-level fusion group that runs at the
// write-back's point (nothing later reads the target's old value), the target
// is a parameter of the same shape, element size and dense layout, no graph
// output is the value, and the group reads the target (if at all) only as it
// writes it: directly (no view), through elementwise nodes whose results all
// have the target's shape, in a body with no reduction, whose results all have
// that shape too: each element is read, then written, once. A training step's
// new weights, moments and gradients are written so, as eager's in-place
// optimizer does. The executor (codegen/executor.cpp) binds such a result to
// its target's tensor and skips the copy; a group it runs eagerly instead
// writes fresh memory, and the copy runs.
std::vector<bool> write_backs_in_place(const Graph &g);

struct LiveRange {
  int64_t def = 0;      // index of the producing node
  int64_t last = 0;     // last node index reading it or a view of it; for a write-back's value, the node
                        // after its write-back point (num_nodes when that is the end)
  bool escapes = false; // a graph output is it or a view of it
};

// Bytes a value of this type occupies (dense).
int64_t value_bytes(const Value *v);
inline int64_t align_arena(int64_t bytes) { return (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment; }
// The same over the type's symbolic dims (a constant for a static type).
SymExpr value_sym_bytes(const Value *v);
SymExpr align_arena(const SymExpr &bytes);

// Liveness of g's top level: node indices, alias roots and the live ranges of
// the fresh results of its nodes.
class Liveness {
public:
  explicit Liveness(const Graph &g);
  const std::vector<Node *> &nodes() const { return nodes_; }
  // Plannable results (escaping ones included), in definition order.
  const std::vector<Value *> &fresh() const { return fresh_; }
  // nullptr for a value that is not a plannable result of a top-level node.
  const LiveRange *range(const Value *v) const;
  // The operand whose memory v may share, or nullptr.
  const Value *parent(const Value *v) const;
  // Whether v is `base` or may share its memory (through views).
  bool shares(const Value *v, const Value *base) const;
  // Whether node `i` may write its result `result` over operand value v, which
  // it reads for the last time: an elementwise op, or a fusion group of
  // elementwise ops and reductions, that reads v (and no view of it) at exactly
  // the index it writes (same shape and element size). In a group with
  // reductions the result must be full-size and stored in the last pass over
  // each row (see stored_in_last_pass in memory_plan.cpp): softmax's y may
  // overwrite x, a value stored before a later pass reads x again may not.
  bool in_place_ok(int64_t i, size_t result, const Value *v) const;

private:
  std::vector<Node *> nodes_;
  std::vector<Value *> fresh_;
  std::unordered_map<const Value *, LiveRange> ranges_;
  std::unordered_map<const Value *, const Value *> parents_;
};

// Throws kiln::Error naming the problem when g's memory plan is inconsistent:
// a value that is not a fresh, non-escaping intermediate of g, a misaligned or
// out-of-arena slot, a slot smaller than its value, or two simultaneously live
// values whose bytes overlap (other than a safe in-place update).
void verify_memory_plan(const Graph &g);

} // namespace kiln::ir
