// dce: removes nodes none of whose results is used. Outputs and write-backs
// count as uses (Graph::has_uses), so effects are never dropped.
#include "passes/rewrite.h"

namespace kiln::passes {

namespace {

class Dce : public Pass {
public:
  std::string_view name() const override { return "dce"; }
  bool handles_symbolic() const override { return true; }

  bool run(ir::Graph &g) override {
    bool changed = false;
    // Last to first: erasing a user makes its producers dead in the same sweep.
    std::vector<ir::Node *> nodes = g.nodes();
    for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
      if (used(g, **it)) continue;
      g.erase(*it);
      changed = true;
    }
    return changed;
  }

private:
  static bool used(const ir::Graph &g, const ir::Node &n) {
    for (const ir::Value *r : n.results())
      if (g.has_uses(r)) return true;
    return false;
  }
};

} // namespace

KILN_REGISTER_PASS(Dce, "dce");

} // namespace kiln::passes
