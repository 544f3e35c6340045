// Checks SSA and use-def integrity, operand and result types against each op's
// shape/dtype rule (the op run on meta tensors), closed fusion bodies and no
// dangling values. Throws kiln::Error naming the graph, the node and the problem.
#pragma once

#include "ir/graph.h"

namespace kiln::ir {

// What verify throws: the message, and the node at fault (nullptr for a
// graph-level problem; a fusion group for a problem at its body's level).
class VerifyError : public Error {
public:
  VerifyError(const std::string &msg, const Node *node) : Error(msg), node_(node) {}
  const Node *node() const { return node_; }

private:
  const Node *node_;
};

void verify(const Graph &g);

} // namespace kiln::ir
