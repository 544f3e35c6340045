// plan-memory: places every intermediate buffer of the graph in one arena
// whose size is fixed at compile time (shapes are static per specialization).
//
// Two steps. First, walking the nodes in execution order, each value joins the
// buffer of an operand it may overwrite in place (a fusion group reading that
// operand for the last time at the index it writes, ir::Liveness::in_place_ok)
// or starts a buffer of its own; a buffer is live from its first value's
// producer to the last reader of its last value (and of every view of it).
// Then the buffers get offsets, largest first, each at the lowest offset where
// it overlaps no placed buffer that is live at the same time (greedy by size:
// a training step's big backward temporaries then reuse the bytes of forward
// values that died, whatever their sizes).
//
// In place is on in "plan-memory" (the default pipeline's) and in its old
// name "plan-memory-inplace"; "plan-memory-no-inplace" turns it off. The
// compiled executor tells such a group's kernel that its output aliases the
// input (KernelDesc::output_aliases_input), so the kernel uses one pointer for
// both and still vectorizes: two pointers to the same bytes fail LLVM's
// runtime overlap check and run the scalar loop (a 256x1024 bias+relu kernel:
// 46 us with separate buffers, 204 us in place before that). Only fusion
// groups compute in place, over the result of another group: the executor
// runs a plain node eagerly, and an eager op never writes over its operand
// (its slot would go unused).
// Graph outputs (and values a graph output views) stay out of the arena: the
// caller keeps them after the call.
//
// Over symbols (issue 17) the same steps give formulas: a buffer's size is its
// type's bytes over the symbols, rounded up to the alignment, and its offset
// 0 or the end of a buffer live at the same time (a max of sums of sizes),
// the lowest at which it provably clears every such buffer at every size
// (see place_buffers_symbolic): a gap that holds it at the traced sizes
// alone is not taken. No value is computed in place: the symbolic executor
// gives a kernel no aliased output yet.
#include "ir/memory_plan.h"
#include "passes/rewrite.h"
#include "passes/plan_memory.h"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "runtime/log.h"

namespace kiln::passes {

namespace {

using ir::BufferAssignment;
using ir::Value;

struct Buffer {
  int64_t size = 0;              // at the traced sizes
  ir::SymExpr sym_size;          // over the symbols (a constant in a static graph)
  int64_t first = 0, last = 0;   // node indices: first value's producer, last reader of the last value
  const Value *tail = nullptr;   // the value computed last into it
  int64_t offset = -1;
  ir::SymMax sym_offset;
};

class Planner {
public:
  Planner(const ir::Graph &g, bool in_place)
      : live_(g), symbolic_(!g.symbol_hints().empty()), in_place_(in_place && !symbolic_), hints_(g.symbol_hints()) {}

  ir::MemoryPlan run() {
    const auto &nodes = live_.nodes();
    for (int64_t i = 0; i < int64_t(nodes.size()); ++i) {
      const ir::Node &n = *nodes[size_t(i)];
      for (size_t r = 0; r < n.results().size(); ++r) assign(i, n, r);
    }
    if (symbolic_) place_buffers_symbolic();
    else place_buffers();
    plan_.symbolic = symbolic_;
    for (auto &[v, a] : plan_.entries) {
      const Buffer &buf = buffers_[size_t(a.buffer)];
      a.offset = buf.offset;
      a.size = buf.size;
      plan_.peak_bytes = std::max(plan_.peak_bytes, buf.offset + buf.size);
      if (!symbolic_) continue;
      a.sym_offset = buf.sym_offset;
      a.sym_size = buf.sym_size;
    }
    for (const Buffer &buf : buffers_)
      if (symbolic_) plan_.sym_peak.add_all(buf.sym_offset.plus(buf.sym_size));
    return std::move(plan_);
  }

private:
  void assign(int64_t i, const ir::Node &n, size_t r) {
    Value *v = n.result(r);
    const ir::LiveRange *range = live_.range(v);
    if (!range || range->escapes || ir::value_sym_bytes(v) == 0) return;
    int64_t want = ir::align_arena(ir::value_bytes(v));
    int64_t b = in_place_ ? in_place(i, n, r, want) : -1;
    if (b < 0) {
      b = int64_t(buffers_.size());
      buffers_.push_back(Buffer{want, ir::align_arena(ir::value_sym_bytes(v)), i, i, nullptr});
    }
    Buffer &buf = buffers_[size_t(b)];
    buf.last = std::max(buf.last, range->last);
    buf.tail = v;
    plan_.entries.emplace_back(v, BufferAssignment{b, 0, 0});
  }

  // The buffer of an operand that node i reads for the last time and may overwrite.
  int64_t in_place(int64_t i, const ir::Node &n, size_t r, int64_t want) {
    if (n.kind() != ir::Node::Kind::FusionGroup) return -1;
    for (const Value *op : n.operands()) {
      // Only over another group's result: the executor writes that into its
      // slot and can give the kernel one pointer for both. An eager result
      // placed in its slot would be read and written through two pointers (the
      // scalar loop), and a reshape may be a view of a parameter, not its slot.
      if (!op || op->kind() != Value::Kind::Result || op->producer()->kind() != ir::Node::Kind::FusionGroup) continue;
      const ir::LiveRange *range = live_.range(op);
      if (!range || range->last != i) continue;
      for (size_t b = 0; b < buffers_.size(); ++b) {
        const Buffer &buf = buffers_[b];
        if (buf.tail != op || buf.last != i || buf.size < want) continue;
        if (!live_.in_place_ok(i, r, op)) break;
        log()->debug("plan-memory: %{} reuses the buffer of %{} in place", n.result(r)->name(), op->name());
        return int64_t(b);
      }
    }
    return -1;
  }

  // Offsets, largest buffer first: the lowest offset where a buffer fits
  // between the placed buffers live at the same time as it.
  void place_buffers() {
    std::vector<size_t> placed;
    std::vector<std::pair<int64_t, int64_t>> taken; // [offset, end) of the live-overlapping placed buffers
    for (size_t b : largest_first()) {
      Buffer &buf = buffers_[b];
      taken.clear();
      for (size_t p : placed) {
        const Buffer &o = buffers_[p];
        if (o.first <= buf.last && buf.first <= o.last) taken.emplace_back(o.offset, o.offset + o.size);
      }
      std::sort(taken.begin(), taken.end());
      int64_t at = 0;
      for (const auto &[lo, hi] : taken) {
        if (at + buf.size <= lo) break;
        at = std::max(at, hi);
      }
      buf.offset = at;
      placed.push_back(b);
    }
  }

  // Over symbols, as place_buffers but with formulas: the lowest candidate
  // offset (0, or the end of a placed buffer live at the same time) at which
  // the buffer provably clears every such buffer at every size: it starts at
  // or after the other's end, or ends at or before the other's start. The
  // end of them all always qualifies; a gap that only the traced sizes leave
  // open does not.
  void place_buffers_symbolic() {
    std::vector<size_t> placed, taken;
    for (size_t b : largest_first()) {
      Buffer &buf = buffers_[b];
      taken.clear();
      for (size_t p : placed) {
        const Buffer &o = buffers_[p];
        if (o.first <= buf.last && buf.first <= o.last) taken.push_back(p);
      }
      std::vector<ir::SymMax> candidates{ir::SymMax()};
      ir::SymMax top;
      for (size_t p : taken) {
        candidates.push_back(end_of(buffers_[p]));
        top.add_all(candidates.back());
      }
      std::stable_sort(candidates.begin(), candidates.end(), [&](const ir::SymMax &x, const ir::SymMax &y) {
        return x.evaluate(hints_) < y.evaluate(hints_);
      });
      buf.sym_offset = top;
      for (const ir::SymMax &at : candidates) {
        if (!clears_all(at, buf.sym_size, taken)) continue;
        buf.sym_offset = at;
        break;
      }
      buf.offset = buf.sym_offset.evaluate(hints_);
      placed.push_back(b);
    }
  }

  // Buffer indices, largest (at the traced sizes) first; ties in creation order.
  std::vector<size_t> largest_first() const {
    std::vector<size_t> order(buffers_.size());
    for (size_t b = 0; b < order.size(); ++b) order[b] = b;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return buffers_[a].size > buffers_[b].size; });
    return order;
  }

  static ir::SymMax end_of(const Buffer &o) { return o.sym_offset.plus(o.sym_size); }

  // Whether [at, at + size) is, at every size, after or before each taken buffer.
  bool clears_all(const ir::SymMax &at, const ir::SymExpr &size, const std::vector<size_t> &taken) const {
    const ir::SymMax end = at.plus(size);
    for (size_t p : taken) {
      const Buffer &o = buffers_[p];
      if (!ir::sym_at_most(end_of(o), at) && !ir::sym_at_most(end, o.sym_offset)) return false;
    }
    return true;
  }

  ir::Liveness live_;
  bool symbolic_;
  bool in_place_;
  std::vector<int64_t> hints_;
  std::vector<Buffer> buffers_;
  ir::MemoryPlan plan_;
};

class PlanMemory : public Pass {
public:
  explicit PlanMemory(bool in_place = true, std::string_view name = "plan-memory") : in_place_(in_place), name_(name) {}
  std::string_view name() const override { return name_; }
  bool handles_symbolic() const override { return true; }

  bool run(ir::Graph &g) override {
    ir::MemoryPlan plan = plan_memory(g, in_place_);
    bool changed = !g.memory_plan() || g.memory_plan()->peak_bytes != plan.peak_bytes ||
                   g.memory_plan()->entries.size() != plan.entries.size();
    for (size_t i = 0; !changed && i < plan.entries.size(); ++i) {
      const auto &[v, s] = plan.entries[i];
      const auto &[ov, os] = g.memory_plan()->entries[i];
      changed = v != ov || s.buffer != os.buffer || s.offset != os.offset || s.size != os.size ||
                !(s.sym_offset == os.sym_offset) || s.sym_size != os.sym_size;
    }
    g.set_memory_plan(std::move(plan));
    return changed;
  }

private:
  bool in_place_;
  std::string_view name_;
};

// The old name of the default, kept for existing pipelines.
class PlanMemoryInPlace : public PlanMemory {
public:
  PlanMemoryInPlace() : PlanMemory(true, "plan-memory-inplace") {}
};

// Every value in a buffer of its own while it is live (no in-place updates).
class PlanMemoryNoInPlace : public PlanMemory {
public:
  PlanMemoryNoInPlace() : PlanMemory(false, "plan-memory-no-inplace") {}
};

} // namespace

ir::MemoryPlan plan_memory(const ir::Graph &g, bool in_place) { return Planner(g, in_place).run(); }

KILN_REGISTER_PASS(PlanMemory, "plan-memory");
KILN_REGISTER_PASS(PlanMemoryInPlace, "plan-memory-inplace");
KILN_REGISTER_PASS(PlanMemoryNoInPlace, "plan-memory-no-inplace");

} // namespace kiln::passes

namespace kiln::passes {

GraphStats graph_stats(const ir::Graph &g) {
  GraphStats s;
  for (const ir::Node *n : g.nodes()) {
    bool view = n->kind() == ir::Node::Kind::Op && ir::alias_source(*n, 0);
    if (n->kind() == ir::Node::Kind::FusionGroup) ++s.fusion_groups;
    else ++s.other_nodes;
    if (view) {
      ++s.view_nodes;
      continue;
    }
    for (const ir::Value *v : n->operands())
      if (v) s.bytes_read += ir::value_bytes(v);
    for (const ir::Value *r : n->results()) s.bytes_written += ir::value_bytes(r);
  }
  if (g.memory_plan()) {
    s.peak_arena_bytes = g.memory_plan()->peak_bytes;
    s.planned_values = int64_t(g.memory_plan()->entries.size());
  }
  return s;
}

} // namespace kiln::passes
