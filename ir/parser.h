// Reads the text form that ir/printer.h writes. Errors are kiln::Error with
// "file:line:col: message"; never a crash or a hang on malformed text.
#pragma once

#include <memory>
#include <string_view>
#include <unordered_map>

#include "ir/graph.h"

namespace kiln::ir {

std::unique_ptr<Graph> parse(std::string_view text, std::string_view filename = "<input>");

// Where each parsed node (nested ones too) starts, so that tools can point a
// verifier error (VerifyError::node()) at its line.
struct SourceLoc {
  int line = 0;
  int col = 0;
};
using SourceMap = std::unordered_map<const Node *, SourceLoc>;
std::unique_ptr<Graph> parse(std::string_view text, std::string_view filename, SourceMap *locations);

} // namespace kiln::ir
