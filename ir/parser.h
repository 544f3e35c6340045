// Reads the text form that ir/printer.h writes. Errors are kiln::Error with
// "file:line:col: message"; never a crash or a hang on malformed text.
#pragma once

#include <memory>
#include <string_view>

#include "ir/graph.h"

namespace kiln::ir {

std::unique_ptr<Graph> parse(std::string_view text, std::string_view filename = "<input>");

} // namespace kiln::ir
