#include "ir/sym.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <initializer_list>
#include <limits>
#include <numeric>

#include "runtime/error.h"
#include "runtime/int_math.h"

namespace kiln::ir {

namespace {

using Atom = SymExpr::Atom;
using Factor = SymExpr::Factor;
using Term = SymExpr::Term;

int64_t checked_add(int64_t a, int64_t b) {
  int64_t r;
  KILN_CHECK(!__builtin_add_overflow(a, b, &r), "symbolic size: ", a, " + ", b, " overflows int64");
  return r;
}

int64_t checked_mul(int64_t a, int64_t b) {
  int64_t r;
  KILN_CHECK(!__builtin_mul_overflow(a, b, &r), "symbolic size: ", a, " * ", b, " overflows int64");
  return r;
}

int64_t checked_neg(int64_t a) {
  KILN_CHECK(a != std::numeric_limits<int64_t>::min(), "symbolic size: -(", a, ") overflows int64");
  return -a;
}

// Python's a // b.
int64_t floor_div(int64_t a, int64_t b) {
  KILN_CHECK(b != 0, "symbolic size: ", a, " // 0, a division by zero");
  KILN_CHECK(!(a == std::numeric_limits<int64_t>::min() && b == -1), "symbolic size: ", a, " // -1 overflows int64");
  return div_floor(a, b);
}

int compare_atom(const Atom &a, const Atom &b) {
  const bool as = a.symbol >= 0, bs = b.symbol >= 0;
  if (as != bs) return as ? -1 : 1; // symbols before divisions
  if (as) return a.symbol < b.symbol ? -1 : (a.symbol > b.symbol ? 1 : 0);
  if (a.div == b.div) return 0;
  if (int c = compare(a.div->num, b.div->num)) return c;
  return compare(a.div->den, b.div->den);
}

int degree(const Term &t) {
  int d = 0;
  for (const Factor &f : t.factors) d += f.power;
  return d;
}

// Monomials: higher degree first, then their factor lists in order.
int compare_monomial(const Term &a, const Term &b) {
  const int da = degree(a), db = degree(b);
  if (da != db) return da > db ? -1 : 1;
  const size_t n = std::min(a.factors.size(), b.factors.size());
  for (size_t i = 0; i < n; ++i) {
    if (int c = compare_atom(a.factors[i].atom, b.factors[i].atom)) return c;
    if (a.factors[i].power != b.factors[i].power) return a.factors[i].power > b.factors[i].power ? -1 : 1;
  }
  if (a.factors.size() != b.factors.size()) return a.factors.size() < b.factors.size() ? -1 : 1;
  return 0;
}

std::vector<Factor> mul_factors(const std::vector<Factor> &a, const std::vector<Factor> &b) {
  std::vector<Factor> out;
  out.reserve(a.size() + b.size());
  size_t i = 0, j = 0;
  while (i < a.size() || j < b.size()) {
    const int c = i == a.size() ? 1 : j == b.size() ? -1 : compare_atom(a[i].atom, b[j].atom);
    if (c < 0) out.push_back(a[i++]);
    else if (c > 0) out.push_back(b[j++]);
    else {
      out.push_back({a[i].atom, a[i].power + b[j].power});
      ++i, ++j;
    }
  }
  return out;
}

// n / d for monomials, when d's factors all appear in n (powers at least d's)
// and d's coefficient divides n's.
std::optional<Term> divide_term(const Term &n, const Term &d) {
  if (d.coeff == 0 || n.coeff % d.coeff != 0) return std::nullopt;
  Term q{n.coeff / d.coeff, {}};
  size_t j = 0;
  for (const Factor &f : n.factors) {
    if (j < d.factors.size() && compare_atom(f.atom, d.factors[j].atom) == 0) {
      const int p = f.power - d.factors[j].power;
      if (p < 0) return std::nullopt;
      if (p > 0) q.factors.push_back({f.atom, p});
      ++j;
    } else {
      q.factors.push_back(f);
    }
  }
  if (j != d.factors.size()) return std::nullopt;
  return q;
}

int64_t pow_checked(int64_t base, int power) {
  int64_t r = 1;
  for (int i = 0; i < power; ++i) r = checked_mul(r, base);
  return r;
}

} // namespace

SymExpr::SymExpr(int64_t c) {
  if (c != 0) terms_.push_back({c, {}});
}

SymExpr SymExpr::symbol(int id) {
  KILN_CHECK(id >= 0, "symbolic size: symbol ids are non-negative, got s", id);
  SymExpr e;
  e.terms_.push_back({1, {Factor{Atom{id, nullptr}, 1}}});
  return e;
}

SymExpr SymExpr::from_terms(std::vector<Term> terms) {
  std::stable_sort(terms.begin(), terms.end(), [](const Term &a, const Term &b) { return compare_monomial(a, b) < 0; });
  SymExpr e;
  for (Term &t : terms) {
    if (!e.terms_.empty() && compare_monomial(e.terms_.back(), t) == 0)
      e.terms_.back().coeff = checked_add(e.terms_.back().coeff, t.coeff);
    else
      e.terms_.push_back(std::move(t));
    if (e.terms_.back().coeff == 0) e.terms_.pop_back();
  }
  return e;
}

std::optional<int64_t> SymExpr::constant() const {
  if (terms_.empty()) return 0;
  if (terms_.size() == 1 && terms_[0].factors.empty()) return terms_[0].coeff;
  return std::nullopt;
}

std::optional<int> SymExpr::as_symbol() const {
  if (terms_.size() != 1 || terms_[0].coeff != 1 || terms_[0].factors.size() != 1) return std::nullopt;
  const Factor &f = terms_[0].factors[0];
  if (f.power != 1 || f.atom.symbol < 0) return std::nullopt;
  return f.atom.symbol;
}

int SymExpr::max_symbol() const {
  int m = -1;
  for (const Term &t : terms_)
    for (const Factor &f : t.factors) {
      m = std::max(m, f.atom.symbol);
      if (f.atom.div) m = std::max({m, f.atom.div->num.max_symbol(), f.atom.div->den.max_symbol()});
    }
  return m;
}

int64_t SymExpr::period() const {
  int64_t p = 1;
  for (const Term &t : terms_)
    for (const Factor &f : t.factors) {
      if (!f.atom.div) continue;
      const std::optional<int64_t> d = f.atom.div->den.constant();
      const int64_t inner = f.atom.div->num.period();
      if (!d || *d <= 0 || inner == 0 || inner > kMaxPeriod / *d) return 0;
      p = std::lcm(p, inner * *d); // the numerator moves by multiples of d
      if (p > kMaxPeriod) return 0;
    }
  return p;
}

namespace {
void collect_symbols(const SymExpr &e, std::vector<int> &out) {
  for (const SymExpr::Term &t : e.terms())
    for (const SymExpr::Factor &f : t.factors) {
      if (f.atom.symbol >= 0) out.push_back(f.atom.symbol);
      if (!f.atom.div) continue;
      collect_symbols(f.atom.div->num, out);
      collect_symbols(f.atom.div->den, out);
    }
}
} // namespace

std::vector<int> SymExpr::symbols() const {
  std::vector<int> ids;
  collect_symbols(*this, ids);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

SymExpr operator+(const SymExpr &a, const SymExpr &b) {
  std::vector<Term> terms = a.terms_;
  terms.insert(terms.end(), b.terms_.begin(), b.terms_.end());
  return SymExpr::from_terms(std::move(terms));
}

SymExpr SymExpr::operator-() const {
  SymExpr e = *this;
  for (Term &t : e.terms_) t.coeff = checked_neg(t.coeff);
  return e;
}

SymExpr operator-(const SymExpr &a, const SymExpr &b) { return a + (-b); }

SymExpr operator*(const SymExpr &a, const SymExpr &b) {
  KILN_CHECK(a.terms_.size() * b.terms_.size() <= size_t(SymExpr::kMaxTerms), "symbolic size: (", a.str(), ") * (",
             b.str(), ") has more than ", SymExpr::kMaxTerms, " terms");
  std::vector<Term> terms;
  terms.reserve(a.terms_.size() * b.terms_.size());
  for (const Term &x : a.terms_)
    for (const Term &y : b.terms_) terms.push_back({checked_mul(x.coeff, y.coeff), mul_factors(x.factors, y.factors)});
  return SymExpr::from_terms(std::move(terms));
}

SymExpr SymExpr::floordiv(const SymExpr &a, const SymExpr &b) {
  auto atom = [](const SymExpr &num, const SymExpr &den) {
    SymExpr e;
    e.terms_.push_back({1, {Factor{Atom{-1, std::make_shared<const SymDiv>(SymDiv{num, den})}, 1}}});
    return e;
  };
  if (std::optional<int64_t> cb = b.constant()) {
    const int64_t c = *cb;
    KILN_CHECK(c != 0, "symbolic size: ", a.str(), " // 0, a division by zero");
    if (c < 0) return floordiv(-a, -b);
    if (c == 1) return a;
    // Pull out what c divides: (q c + r) // c = q + r // c for integer-valued
    // q, leaving the numerator's coefficients in [0, c).
    std::vector<Term> q, r;
    for (const Term &t : a.terms_) {
      const int64_t qc = floor_div(t.coeff, c), rc = t.coeff % c < 0 ? t.coeff % c + c : t.coeff % c; // no overflow
      if (qc != 0) q.push_back({qc, t.factors});
      if (rc != 0) r.push_back({rc, t.factors});
    }
    SymExpr quot = from_terms(std::move(q)), rem = from_terms(std::move(r));
    if (std::optional<int64_t> rc = rem.constant()) return quot + floor_div(*rc, c);
    // (g y) // (g c') == y // c' for the common factor g of r's coefficients and c.
    int64_t g = c;
    for (const Term &t : rem.terms_) g = std::gcd(g, t.coeff);
    if (g > 1) {
      for (Term &t : rem.terms_) t.coeff /= g;
      return quot + atom(rem, c / g);
    }
    return quot + atom(rem, c);
  }
  if (std::optional<SymExpr> q = exact_div(a, b)) return *q;
  return atom(a, b);
}

SymExpr SymExpr::mod(const SymExpr &a, const SymExpr &b) { return a - b * floordiv(a, b); }

std::optional<SymExpr> SymExpr::exact_div(const SymExpr &a, const SymExpr &b) {
  if (b.terms_.empty()) return std::nullopt; // b == 0
  if (a.terms_.empty()) return SymExpr();
  // Division by b's leading term until nothing is left: every quotient term
  // is exact, so a == q b once the remainder is 0. (Bounded: a remainder
  // whose leading term b's does not divide, or a long one, gives up.)
  SymExpr q, r = a;
  const Term &lead = b.terms_.front();
  for (int step = 0; step < 64 && !r.terms_.empty(); ++step) {
    std::optional<Term> t = divide_term(r.terms_.front(), lead);
    if (!t) return std::nullopt;
    SymExpr ts = from_terms({*t});
    q = q + ts;
    r = r - ts * b;
  }
  if (!r.terms_.empty()) return std::nullopt;
  return q;
}

int64_t SymExpr::evaluate_terms(std::span<const int64_t> values) const {
  int64_t sum = 0;
  for (const Term &t : terms_) {
    int64_t prod = t.coeff;
    for (const Factor &f : t.factors) {
      int64_t v;
      if (f.atom.symbol >= 0) {
        KILN_CHECK(size_t(f.atom.symbol) < values.size(), "symbolic size ", str(), ": s", f.atom.symbol,
                   " has no value (", values.size(), " given)");
        v = values[size_t(f.atom.symbol)];
      } else {
        const int64_t den = f.atom.div->den.evaluate(values);
        KILN_CHECK(den != 0, "symbolic size ", str(), ": ", f.atom.div->den.str(), " is 0, a division by zero");
        v = floor_div(f.atom.div->num.evaluate(values), den);
      }
      prod = checked_mul(prod, pow_checked(v, f.power));
    }
    sum = checked_add(sum, prod);
  }
  return sum;
}

namespace {

// Function syntax rather than Python's //, which starts a comment in the IR text.
std::string atom_str(const Atom &a) {
  if (a.symbol >= 0) return "s" + std::to_string(a.symbol);
  return "floordiv(" + a.div->num.str() + ", " + a.div->den.str() + ")";
}

} // namespace

std::string SymExpr::str() const {
  if (terms_.empty()) return "0";
  std::string out;
  for (size_t i = 0; i < terms_.size(); ++i) {
    const Term &t = terms_[i];
    const bool neg = t.coeff < 0;
    const uint64_t mag = neg ? uint64_t(0) - uint64_t(t.coeff) : uint64_t(t.coeff);
    std::string body;
    for (const Factor &f : t.factors)
      for (int p = 0; p < f.power; ++p) body += (body.empty() ? "" : "*") + atom_str(f.atom);
    std::string piece = body.empty() ? std::to_string(mag) : mag == 1 ? body : std::to_string(mag) + "*" + body;
    if (i == 0) out = (neg ? "-" : "") + piece;
    else out += (neg ? " - " : " + ") + piece;
  }
  return out;
}

namespace {

class Parser {
public:
  explicit Parser(std::string_view s) : s_(s) {}

  SymExpr parse() {
    SymExpr e = expr();
    skip();
    if (i_ != s_.size()) fail(std::string("unexpected '") + s_[i_] + "'");
    return e;
  }

private:
  SymExpr expr() {
    SymExpr e = term();
    for (;;) {
      if (eat("+")) e = e + term();
      else if (eat("-")) e = e - term();
      else return e;
    }
  }

  SymExpr term() {
    SymExpr e = factor();
    while (eat("*")) e = e * factor();
    return e;
  }

  SymExpr factor() {
    // Text is untrusted (the IR parser hands dims over): bounded recursion.
    struct Depth {
      int &d;
      explicit Depth(int &depth) : d(++depth) {}
      ~Depth() { --d; }
    } depth(depth_);
    if (depth_ > kMaxDepth) fail("nested more than " + std::to_string(kMaxDepth) + " deep");
    if (eat("-")) return -factor();
    if (eat("(")) {
      SymExpr e = expr();
      if (!eat(")")) fail("expected ')'");
      return e;
    }
    for (const char *fn : {"floordiv", "mod"}) {
      if (!eat(fn)) continue;
      if (!eat("(")) fail(std::string("expected '(' after ") + fn);
      SymExpr a = expr();
      if (!eat(",")) fail(std::string("expected ',' between ") + fn + "'s operands");
      SymExpr b = expr();
      if (!eat(")")) fail("expected ')'");
      return fn[0] == 'f' ? SymExpr::floordiv(a, b) : SymExpr::mod(a, b);
    }
    skip();
    const bool sym = i_ < s_.size() && s_[i_] == 's';
    const size_t start = i_ + (sym ? 1 : 0);
    if (start >= s_.size() || !std::isdigit(static_cast<unsigned char>(s_[start])))
      fail("expected a number, a symbol s<k> or '('");
    int64_t v = 0;
    auto [end, ec] = std::from_chars(s_.data() + start, s_.data() + s_.size(), v);
    if (ec != std::errc()) fail("number out of range");
    if (sym && v > std::numeric_limits<int>::max()) fail("symbol id out of range");
    i_ = size_t(end - s_.data());
    return sym ? SymExpr::symbol(int(v)) : SymExpr(v);
  }

  void skip() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }

  bool eat(std::string_view tok) {
    skip();
    if (s_.substr(i_, tok.size()) != tok) return false;
    i_ += tok.size();
    return true;
  }

  [[noreturn]] void fail(const std::string &what) const {
    KILN_FAIL("symbolic size '", s_, "': ", what, " at position ", i_);
  }

  static constexpr int kMaxDepth = 64;
  std::string_view s_;
  size_t i_ = 0;
  int depth_ = 0;
};

} // namespace

SymExpr SymExpr::parse(std::string_view text) { return Parser(text).parse(); }

bool SymExpr::operator==(const SymExpr &o) const { return compare(*this, o) == 0; }

int compare(const SymExpr &a, const SymExpr &b) {
  const size_t n = std::min(a.terms_.size(), b.terms_.size());
  for (size_t i = 0; i < n; ++i) {
    if (int c = compare_monomial(a.terms_[i], b.terms_[i])) return c;
    if (a.terms_[i].coeff != b.terms_[i].coeff) return a.terms_[i].coeff < b.terms_[i].coeff ? -1 : 1;
  }
  if (a.terms_.size() != b.terms_.size()) return a.terms_.size() < b.terms_.size() ? -1 : 1;
  return 0;
}

namespace {

// Whether the atom is >= 0 wherever the symbols are: a symbol, or the floor
// division of a sum of such terms with coefficients >= 0 by a constant > 0.
bool nonnegative_atom(const SymExpr::Atom &a) {
  if (a.symbol >= 0) return true;
  std::optional<int64_t> den = a.div->den.constant();
  if (!den || *den <= 0) return false;
  for (const SymExpr::Term &t : a.div->num.terms()) {
    if (t.coeff < 0) return false;
    for (const SymExpr::Factor &f : t.factors)
      if (!nonnegative_atom(f.atom)) return false;
  }
  return true;
}

} // namespace

bool sym_at_least(const SymExpr &a, const SymExpr &b) {
  const SymExpr diff = a - b; // (a range-for over (a - b).terms() would read a destroyed temporary)
  for (const SymExpr::Term &t : diff.terms()) {
    if (t.coeff < 0) return false;
    for (const SymExpr::Factor &f : t.factors)
      if (!nonnegative_atom(f.atom)) return false;
  }
  return true;
}

bool sym_at_most(const SymMax &a, const SymMax &b) {
  const std::vector<SymExpr> zero{SymExpr()};
  const std::vector<SymExpr> &bt = b.terms.empty() ? zero : b.terms;
  for (const SymExpr &t : a.terms.empty() ? zero : a.terms)
    if (std::none_of(bt.begin(), bt.end(), [&](const SymExpr &u) { return sym_at_least(u, t); })) return false;
  return true;
}

void SymMax::add(const SymExpr &e) {
  for (const SymExpr &t : terms)
    if (sym_at_least(t, e)) return;
  std::erase_if(terms, [&](const SymExpr &t) { return sym_at_least(e, t); });
  terms.insert(std::lower_bound(terms.begin(), terms.end(), e,
                                [](const SymExpr &a, const SymExpr &b) { return compare(a, b) < 0; }),
               e);
  if (terms.size() <= kMaxTerms) return;
  SymExpr sum;
  for (const SymExpr &t : terms) sum = sum + t;
  terms = {sum};
}

SymMax SymMax::plus(const SymExpr &e) const {
  SymMax r;
  if (terms.empty()) r.add(e);
  for (const SymExpr &t : terms) r.add(t + e);
  return r;
}

int64_t SymMax::evaluate(std::span<const int64_t> values) const {
  int64_t r = 0;
  for (const SymExpr &t : terms) r = std::max(r, t.evaluate(values));
  return r;
}

std::string SymMax::str() const {
  if (terms.empty()) return "0";
  if (terms.size() == 1) return terms[0].str();
  std::string s = "max(";
  for (size_t i = 0; i < terms.size(); ++i) s += (i ? ", " : "") + terms[i].str();
  return s + ")";
}

SymMax SymMax::parse(std::string_view text) {
  auto trim = [](std::string_view s) {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
    return s;
  };
  std::string_view body = trim(text);
  SymMax r;
  if (body.substr(0, 3) != "max") {
    r.add(SymExpr::parse(body));
    return r;
  }
  body = trim(body.substr(3));
  KILN_CHECK(body.size() >= 2 && body.front() == '(' && body.back() == ')', "symbolic size '", text,
             "': expected max(a, b, ...)");
  for (std::string_view term : split_top_level(body.substr(1, body.size() - 2))) r.add(SymExpr::parse(term));
  return r;
}

std::vector<std::string_view> split_top_level(std::string_view text) {
  std::vector<std::string_view> parts;
  int parens = 0;
  size_t begin = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i < text.size() && (text[i] != ',' || parens != 0)) {
      parens += text[i] == '(' ? 1 : text[i] == ')' ? -1 : 0;
      continue;
    }
    parts.push_back(text.substr(begin, i - begin));
    begin = i + 1;
  }
  return parts;
}

} // namespace kiln::ir
