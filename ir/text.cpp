#include "ir/text.h"

#include <charconv>
#include <cmath>
#include <system_error>

namespace kiln::ir::text {

namespace {
bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
         c == '$' || c == '-';
}

// to_chars drops the '.' of integral values ("2"): add ".0" so the text stays a float.
std::string finish_float(const char *begin, const char *end) {
  std::string s(begin, end);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

template <class F> std::string format_fp(F v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return finish_float(buf, r.ptr);
}
} // namespace

bool is_bare_name(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!is_name_char(c)) return false;
  return true;
}

std::string quoted(std::string_view s) {
  static const char hex[] = "0123456789abcdef";
  std::string out = "\"";
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u >= 0x7f) {
      out += "\\x";
      out += hex[u >> 4];
      out += hex[u & 15];
    } else {
      out += c;
    }
  }
  out += '"';
  return out;
}

std::string name(std::string_view s) { return is_bare_name(s) ? std::string(s) : quoted(s); }

std::string format_double(double v) { return format_fp(v); }
std::string format_float(float v) { return format_fp(v); }

} // namespace kiln::ir::text
