// Symbolic sizes (issue 17, "Dynamic shapes"): the sizes that shape rules
// compute from dims whose values are known only per call.
//
// A SymExpr is an integer polynomial over atoms. An atom is a symbol s<k> (a
// dim bound per call) or a floor division (a // b) that did not simplify. Every
// operation returns the normal form: terms sorted (highest degree first), like
// terms merged, zero terms dropped, and the numerator of a division by a
// constant c reduced to coefficients in [0, c). So == is structural and sound:
// (s0 + 1) * (s0 + 1) == s0*s0 + 2*s0 + 1, and (128*s0) // 64 == 2*s0.
//
// Values are immutable and cheap to copy (division atoms are shared).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::ir {

class SymExpr;
struct SymDiv; // an atom (num // den); defined in sym.cpp

class SymExpr {
public:
  SymExpr() = default; // the constant 0
  SymExpr(int64_t c);  // a constant (implicit, as sizes are ints)
  // s<id>; id >= 0.
  static SymExpr symbol(int id);

  // The value when the expression mentions no symbol.
  std::optional<int64_t> constant() const;
  bool is_constant() const { return constant().has_value(); }
  // k when the expression is s<k> alone (a dim a call binds), else nullopt.
  std::optional<int> as_symbol() const;
  // The highest symbol id mentioned, -1 when none.
  int max_symbol() const;
  // A step P >= 1 such that moving the symbols by multiples of P moves every
  // floor division in the expression by a whole amount: the expression is then
  // a polynomial in the moves, as one without divisions is in the symbols
  // (codegen probes kernels at such moves). 1 without divisions; 0 when a
  // divisor is symbolic or P would exceed kMaxPeriod.
  int64_t period() const;
  static constexpr int64_t kMaxPeriod = 1024;
  // The ids of the symbols mentioned, ascending, each once.
  std::vector<int> symbols() const;

  friend SymExpr operator+(const SymExpr &a, const SymExpr &b);
  friend SymExpr operator-(const SymExpr &a, const SymExpr &b);
  friend SymExpr operator*(const SymExpr &a, const SymExpr &b);
  SymExpr operator-() const;

  // floor(a / b), as Python's // (what torch computes for sizes). A constant
  // zero divisor is a kiln::Error.
  static SymExpr floordiv(const SymExpr &a, const SymExpr &b);
  // a - b * (a // b).
  static SymExpr mod(const SymExpr &a, const SymExpr &b);
  // a / b when b divides a for every value of the symbols (what a reshape with
  // -1 needs); nullopt when that cannot be shown.
  static std::optional<SymExpr> exact_div(const SymExpr &a, const SymExpr &b);

  // The value with s<k> = values[k]. kiln::Error on a symbol without a value,
  // a division by zero or an int64 overflow.
  int64_t evaluate(std::span<const int64_t> values) const {
    // A constant or a bare symbol (most dims) is read inline: each call of a
    // symbolic plan evaluates its results' sizes and its kernels' extents.
    if (terms_.size() == 1) {
      const Term &t = terms_[0];
      if (t.factors.empty()) return t.coeff;
      const int s = t.factors.size() == 1 && t.coeff == 1 && t.factors[0].power == 1 ? t.factors[0].atom.symbol : -1;
      if (s >= 0 && size_t(s) < values.size()) return values[size_t(s)];
    }
    return evaluate_terms(values);
  }

  // "2*s0*s1 + floordiv(s2 + 1, 4) - 3"; parse() reads it back (and accepts
  // any spacing, parentheses, + - * and mod(a, b)). A parse error is a
  // kiln::Error naming the text and the position.
  // (Not Python's //: in the IR text // starts a comment.)
  std::string str() const;
  static SymExpr parse(std::string_view text);

  bool operator==(const SymExpr &o) const;
  bool operator!=(const SymExpr &o) const { return !(*this == o); }
  // A product with more terms than this is a kiln::Error (untrusted text
  // such as (s0 + s1)*(s2 + s3)*... would otherwise grow without bound).
  static constexpr int kMaxTerms = 4096;

  // A total order on normal forms (sorting, maps).
  friend int compare(const SymExpr &a, const SymExpr &b);

  struct Atom {
    int symbol = -1;                  // >= 0: s<symbol>
    std::shared_ptr<const SymDiv> div; // else a division
  };
  struct Factor {
    Atom atom;
    int power = 1;
  };
  struct Term {
    int64_t coeff = 0;
    std::vector<Factor> factors; // sorted by atom, each atom once; empty: the constant term
  };
  const std::vector<Term> &terms() const { return terms_; }

private:
  int64_t evaluate_terms(std::span<const int64_t> values) const; // evaluate's general walk
  static SymExpr from_terms(std::vector<Term> terms); // normalizes
  std::vector<Term> terms_;
};

int compare(const SymExpr &a, const SymExpr &b);

struct SymDiv {
  SymExpr num, den;
};

// The largest of some sizes, 0 when there are none: an arena offset over
// symbols (passes/plan_memory.cpp places a buffer above every buffer live with
// it, so its offset is the largest of their ends). Terms are kept sorted, with
// no duplicate and none that another term bounds at every value of the
// symbols (see add).
struct SymMax {
  std::vector<SymExpr> terms;

  // Adds e, unless a term is >= e at every value of the symbols; drops the
  // terms e is >= to. Bounds are shown term by term: a - b whose every
  // coefficient is >= 0 (sizes, their products and floor divisions are >= 0).
  // More terms than kMaxTerms fold into their sum, which bounds them all as
  // long as every term is >= 0 (offsets are sums of sizes).
  void add(const SymExpr &e);
  void add_all(const SymMax &m) {
    for (const SymExpr &t : m.terms) add(t);
  }
  static constexpr size_t kMaxTerms = 16;
  // Each term plus e.
  SymMax plus(const SymExpr &e) const;
  int64_t evaluate(std::span<const int64_t> values) const;
  // "0", "1024*s0" or "max(1024*s0, 4096)"; parse() reads it back (kiln::Error naming the text).
  std::string str() const;
  static SymMax parse(std::string_view text);
  bool operator==(const SymMax &o) const { return terms == o.terms; }
};

// The comma-separated parts of text at parenthesis depth 0 ("s0, floordiv(s1, 2)"
// -> "s0", " floordiv(s1, 2)"), untrimmed: a symbolic type's dims, max(...)'s terms.
std::vector<std::string_view> split_top_level(std::string_view text);

// Whether a >= b at every value >= 0 of the symbols, shown coefficient by coefficient.
bool sym_at_least(const SymExpr &a, const SymExpr &b);
// Whether a <= b at every such value: each term of a is bounded by a term of b.
bool sym_at_most(const SymMax &a, const SymMax &b);

} // namespace kiln::ir
