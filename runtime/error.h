// kiln::Error and the argument-checking helpers every public function uses.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace kiln {

// Every error kiln reports to a user. The message names the op, the shapes or
// dtypes involved and the argument at fault, e.g.
// "add: shapes [2, 3] and [4] are not broadcastable".
class Error : public std::runtime_error {
public:
  explicit Error(const std::string &msg) : std::runtime_error(msg) {}
};

// Thrown when a traced function reads tensor data (item, data_ptr, printing),
// which would make the graph depend on values it cannot see.
class TraceError : public Error {
public:
  explicit TraceError(const std::string &msg) : Error(msg) {}
};

namespace detail {
template <class... Args> std::string concat(const Args &...args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
} // namespace detail

// KILN_CHECK(cond, "op", ": message parts", ...) throws kiln::Error when cond is false.
#define KILN_CHECK(cond, ...)                                                  \
  do {                                                                         \
    if (!(cond)) [[unlikely]]                                                  \
      throw ::kiln::Error(::kiln::detail::concat(__VA_ARGS__));                \
  } while (0)

#define KILN_FAIL(...) throw ::kiln::Error(::kiln::detail::concat(__VA_ARGS__))

} // namespace kiln
