// The IR's text form (see ir/graph.h for an example). Stable and readable:
// one node per line, result types printed, `%name` values, `@name` graphs,
// fusion-group bodies nested. parse(print(g)) prints identically.
#pragma once

#include <iosfwd>
#include <string>

#include "ir/graph.h"

namespace kiln::ir {

std::string print(const Graph &g);
void print(const Graph &g, std::ostream &os);

} // namespace kiln::ir
