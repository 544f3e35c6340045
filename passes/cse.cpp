// cse: merges nodes with the same op, attributes, operands and result types
// (the later node's results are replaced by the earlier one's). The graph is
// functional (in-place ops were functionalized while tracing), so two such
// nodes always compute the same values, except random ops (new draws per
// node), which are never merged.
#include <map>
#include <tuple>

#include "passes/rewrite.h"

namespace kiln::passes {

namespace {

// Cheap bucket key; candidates in a bucket are compared exactly.
using Key = std::tuple<int, std::vector<const ir::Value *>, size_t>;

Key key_of(const ir::Node &n) {
  return {int(n.op()), {n.operands().begin(), n.operands().end()}, n.attrs().size()};
}

bool same(const ir::Node &a, const ir::Node &b) {
  if (a.op() != b.op() || a.operands() != b.operands() || a.attrs() != b.attrs()) return false;
  if (a.results().size() != b.results().size()) return false;
  for (size_t i = 0; i < a.results().size(); ++i)
    if (!(a.result(i)->type() == b.result(i)->type())) return false;
  return true;
}

class Cse : public Pass {
public:
  std::string_view name() const override { return "cse"; }
  bool handles_symbolic() const override { return true; }

  bool run(ir::Graph &g) override {
    bool changed = false;
    std::map<Key, std::vector<ir::Node *>> seen;
    for (ir::Node *n : g.nodes()) {
      // A fusion group's body is not compared; groups are left alone.
      if (n->kind() != ir::Node::Kind::Op || n->results().empty()) continue;
      if (is_random(n->op())) continue;
      std::vector<ir::Node *> &bucket = seen[key_of(*n)];
      ir::Node *twin = find_twin(bucket, *n);
      if (!twin) {
        bucket.push_back(n);
        continue;
      }
      for (size_t i = 0; i < n->results().size(); ++i) g.replace_all_uses(n->result(i), twin->result(i));
      if (!has_effect_uses(g, *n)) g.erase(n);
      changed = true;
    }
    return changed;
  }

private:
  static ir::Node *find_twin(const std::vector<ir::Node *> &bucket, const ir::Node &n) {
    for (ir::Node *c : bucket)
      if (same(*c, n)) return c;
    return nullptr;
  }
  // replace_all_uses does not retarget write-back targets; those are inputs/params, never results.
  static bool has_effect_uses(const ir::Graph &g, const ir::Node &n) {
    for (const ir::Value *r : n.results())
      if (g.has_uses(r)) return true;
    return false;
  }
};

} // namespace

KILN_REGISTER_PASS(Cse, "cse");

} // namespace kiln::passes
