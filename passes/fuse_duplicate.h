// INTERNAL to passes/fuse.cpp: duplicating a cheap elementwise producer into
// the groups of its consumers when that saves the producer's buffer.
//
// After fuse has grouped the graph, a value computed in one group and read by
// nodes of other groups is written to memory by the first group and read back
// by the others. When the value is cheap to recompute (add, mul, compare,
// where, ... of a few operands) and every one of those readers sits in a group
// that can compute it itself, each such group gets its own copy of the
// expression and the buffer disappears.
#pragma once

#include <string>

#include "ir/graph.h"

namespace kiln::passes {

// What duplication needs from fuse's grouping. Group ids are fuse's own.
class FuseGroups {
public:
  virtual ~FuseGroups() = default;
  // The group of `n`, or -1 when n runs on its own (eagerly, or not fusible).
  virtual int group_of(const ir::Node &n) const = 0;
  // The shape of `group`'s widest value (its iteration space); in a symbolic
  // graph, a symbolic dim is a negative key (never a size).
  virtual const Dims &domain(int group) const = 0;
  // The contraction heading `group` (a GEMM/conv epilogue group), or nullptr.
  virtual const ir::Node *contraction_of(int group) const = 0;
  // Why a copy of `n` (same op, same result type) cannot join `group` with
  // `extra` other new members, or "" when it can (shape, group size).
  virtual std::string misfit(const ir::Node &n, int group, size_t extra) const = 0;
  // The result name of `group`'s first node: logs call a forming group "the
  // group of %12"; its own %id is logged when it is outlined.
  virtual std::string seed(int group) const = 0;
  // Membership changes: a new node joins a group; a node leaves its group.
  virtual void add(ir::Node &n, int group) = 0;
  virtual void remove(const ir::Node &n) = 0;
};

// Duplicates every producer that qualifies (see fuse_duplicate.cpp for the cost
// model), rewiring its readers to their group's copy. New nodes are created in
// `g` before their first reader and added to `groups`; producers left without
// readers are removed from their group and erased. Each refusal is logged at
// debug level with its reason. Returns whether the graph changed.
bool duplicate_cheap_producers(ir::Graph &g, FuseGroups &groups);

} // namespace kiln::passes
