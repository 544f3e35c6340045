// Lexical pieces shared by the printer and the parser, so that what one writes
// the other reads back exactly.
#pragma once

#include <string>
#include <string_view>

namespace kiln::ir::text {

// True when `s` can be printed bare after '%' or '@': [A-Za-z0-9_.$-]+ .
bool is_bare_name(std::string_view s);
// `s` bare when possible, else quoted with \" \\ \n \t and \xHH escapes.
std::string name(std::string_view s);
// A string literal: quoted with the same escapes.
std::string quoted(std::string_view s);
// The shortest text that parses back to exactly `v`, always with a '.' or an
// exponent (or nan/inf/-inf) so that it reads as a float, never as an int.
std::string format_double(double v);
std::string format_float(float v);

} // namespace kiln::ir::text
