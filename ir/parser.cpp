// A recursive-descent parser for the text that ir/printer.cpp writes. Every
// error is a kiln::Error "file:line:col: message"; input size bounds the work
// (no step re-reads text), fusion-group nesting is bounded, and numbers and
// shapes are range-checked before anything is allocated.
#include "ir/parser.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <istream>
#include <optional>
#include <unordered_map>

#include "ir/op_signature.h"
#include "ir/text.h"

namespace kiln::ir {

namespace {

constexpr int kMaxGroupDepth = 32;
constexpr int64_t kMaxDim = int64_t(1) << 40;
constexpr int64_t kMaxNumel = int64_t(1) << 50;
constexpr size_t kMaxNumberLength = 512;

// An Error that already carries its location.
class ParseError : public Error {
public:
  using Error::Error;
};

enum class Tok {
  Eof, Percent, At, Ident, Int, Float, String,
  LParen, RParen, LBracket, RBracket, LBrace, RBrace, Comma, Colon, Equal, Arrow
};

const char *tok_name(Tok t) {
  static const char *names[] = {"end of file", "%value", "@name", "identifier", "integer", "float",
                                "string",      "'('",    "')'",   "'['",        "']'",     "'{'",
                                "'}'",         "','",    "':'",   "'='",        "'<-'"};
  return names[static_cast<int>(t)];
}

struct Token {
  Tok kind = Tok::Eof;
  std::string text; // name (unescaped), identifier, number or string contents
  int line = 1, col = 1;
};

class Lexer {
public:
  Lexer(std::string_view src, std::string_view file) : src_(src), file_(file) {}

  [[noreturn]] void fail(int line, int col, const std::string &msg) const {
    throw ParseError(std::string(file_) + ":" + std::to_string(line) + ":" + std::to_string(col) + ": " + msg);
  }

  // Bytes of text not yet lexed (after the token last returned).
  size_t remaining() const { return src_.size() - pos_; }

  // Just after a '[': the text up to its ']' on the same line (parentheses
  // balanced), or nullopt when there is none. A symbolic type's dims are
  // read as text: they hold '*' and '+', which are no tokens.
  std::optional<std::string_view> bracket_body() const {
    int parens = 0;
    for (size_t i = pos_; i < src_.size(); ++i) {
      const char c = src_[i];
      if (c == '\n' || c == '[' || c == '{' || c == '}' || (c == ']' && parens == 0))
        return c == ']' ? std::optional<std::string_view>(src_.substr(pos_, i - pos_)) : std::nullopt;
      parens += c == '(' ? 1 : c == ')' ? -1 : 0;
    }
    return std::nullopt;
  }
  // Skips what bracket_body returned and its ']'.
  void skip_bracket_body(size_t n) {
    for (size_t i = 0; i <= n; ++i) advance();
  }

  Token next() {
    skip_space_and_comments();
    Token t;
    t.line = line_;
    t.col = col_;
    if (pos_ >= src_.size()) return t;
    char c = src_[pos_];
    if (c == '%' || c == '@') {
      advance();
      t.kind = c == '%' ? Tok::Percent : Tok::At;
      t.text = name_after_sigil(t);
      return t;
    }
    if (c == '"') {
      t.kind = Tok::String;
      t.text = string_literal(t);
      return t;
    }
    if (is_digit(c) || ((c == '-' || c == '+') && pos_ + 1 < src_.size() &&
                        (is_digit(src_[pos_ + 1]) || is_alpha(src_[pos_ + 1]))))
      return number(t);
    if (is_alpha(c) || c == '_') {
      size_t b = pos_;
      while (pos_ < src_.size() && (is_alpha(src_[pos_]) || is_digit(src_[pos_]) || src_[pos_] == '_' ||
                                    src_[pos_] == '.'))
        advance();
      t.text = std::string(src_.substr(b, pos_ - b));
      t.kind = (t.text == "inf" || t.text == "nan") ? Tok::Float : Tok::Ident;
      return t;
    }
    advance();
    switch (c) {
    case '(': t.kind = Tok::LParen; return t;
    case ')': t.kind = Tok::RParen; return t;
    case '[': t.kind = Tok::LBracket; return t;
    case ']': t.kind = Tok::RBracket; return t;
    case '{': t.kind = Tok::LBrace; return t;
    case '}': t.kind = Tok::RBrace; return t;
    case ',': t.kind = Tok::Comma; return t;
    case ':': t.kind = Tok::Colon; return t;
    case '=': t.kind = Tok::Equal; return t;
    case '<':
      if (pos_ < src_.size() && src_[pos_] == '-') {
        advance();
        t.kind = Tok::Arrow;
        return t;
      }
      break;
    default: break;
    }
    fail(t.line, t.col, "unexpected character " + printable(c));
  }

private:
  static bool is_digit(char c) { return c >= '0' && c <= '9'; }
  static bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
  static bool is_name_char(char c) {
    return is_alpha(c) || is_digit(c) || c == '_' || c == '.' || c == '$' || c == '-';
  }
  static std::string printable(char c) {
    unsigned char u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f) return std::string("'") + c + "'";
    static const char hex[] = "0123456789abcdef";
    return std::string("'\\x") + hex[u >> 4] + hex[u & 15] + "'";
  }

  void advance() {
    if (src_[pos_] == '\n') {
      ++line_;
      col_ = 1;
    } else {
      ++col_;
    }
    ++pos_;
  }

  void skip_space_and_comments() {
    while (pos_ < src_.size()) {
      char c = src_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        advance();
      } else if (c == '/' && pos_ + 1 < src_.size() && src_[pos_ + 1] == '/') {
        while (pos_ < src_.size() && src_[pos_] != '\n') advance();
      } else {
        break;
      }
    }
  }

  std::string name_after_sigil(const Token &t) {
    if (pos_ < src_.size() && src_[pos_] == '"') return string_literal(t);
    size_t b = pos_;
    while (pos_ < src_.size() && is_name_char(src_[pos_])) advance();
    if (pos_ == b) fail(t.line, t.col, "expected a name after '" + std::string(1, src_[b - 1]) + "'");
    return std::string(src_.substr(b, pos_ - b));
  }

  int hex_digit(char c) const {
    if (is_digit(c)) return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  std::string string_literal(const Token &t) {
    advance(); // opening quote
    std::string out;
    for (;;) {
      if (pos_ >= src_.size() || src_[pos_] == '\n') fail(t.line, t.col, "unterminated string");
      char c = src_[pos_];
      advance();
      if (c == '"') return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= src_.size()) fail(t.line, t.col, "unterminated string");
      char e = src_[pos_];
      int line = line_, col = col_;
      advance();
      switch (e) {
      case '"': out += '"'; break;
      case '\\': out += '\\'; break;
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'x': {
        int hi = pos_ < src_.size() ? hex_digit(src_[pos_]) : -1;
        int lo = pos_ + 1 < src_.size() ? hex_digit(src_[pos_ + 1]) : -1;
        if (hi < 0 || lo < 0) fail(line, col, "bad \\x escape: expected two hex digits");
        advance();
        advance();
        out += static_cast<char>(hi * 16 + lo);
        break;
      }
      default: fail(line, col - 1, "unknown escape '\\" + std::string(1, e) + "'");
      }
    }
  }

  Token number(Token t) {
    size_t b = pos_;
    if (src_[pos_] == '-' || src_[pos_] == '+') advance();
    bool is_float = false;
    if (pos_ < src_.size() && is_alpha(src_[pos_])) {
      size_t w = pos_;
      while (pos_ < src_.size() && is_alpha(src_[pos_])) advance();
      std::string_view word = src_.substr(w, pos_ - w);
      if (word != "inf" && word != "nan") fail(t.line, t.col, "expected a number");
      is_float = true;
    } else {
      while (pos_ < src_.size() && is_digit(src_[pos_])) advance();
      if (pos_ < src_.size() && src_[pos_] == '.') {
        is_float = true;
        advance();
        while (pos_ < src_.size() && is_digit(src_[pos_])) advance();
      }
      if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
        is_float = true;
        advance();
        if (pos_ < src_.size() && (src_[pos_] == '-' || src_[pos_] == '+')) advance();
        size_t d = pos_;
        while (pos_ < src_.size() && is_digit(src_[pos_])) advance();
        if (d == pos_) fail(t.line, t.col, "bad exponent in number");
      }
    }
    if (pos_ - b > kMaxNumberLength) fail(t.line, t.col, "number is too long");
    t.kind = is_float ? Tok::Float : Tok::Int;
    t.text = std::string(src_.substr(b, pos_ - b));
    return t;
  }

  std::string_view src_;
  std::string_view file_;
  size_t pos_ = 0;
  int line_ = 1, col_ = 1;
};

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
      diag = up;
    }
  }
  return row[b.size()];
}

// "; did you mean 'add'?" when a candidate is close enough, else "".
std::string did_you_mean(std::string_view word, const std::vector<std::string_view> &candidates) {
  if (word.size() > 64) return "";
  std::string_view best;
  size_t best_d = 3;
  for (std::string_view c : candidates) {
    size_t d = edit_distance(word, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  return best.empty() ? "" : "; did you mean '" + std::string(best) + "'?";
}

const std::vector<std::string_view> &all_mnemonics() {
  static const std::vector<std::string_view> names = [] {
    std::vector<std::string_view> v;
    for (int i = 0; i < kNumOps; ++i) v.push_back(op_info(OpId(i)).mnemonic);
    v.push_back("fusion_group");
    return v;
  }();
  return names;
}

std::optional<DType> dtype_named(std::string_view s) {
  for (DType d : {kBool, kUInt8, kInt8, kInt16, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64})
    if (short_name(d) == s) return d;
  return std::nullopt;
}

// The AttrValue alternative of a parsed value, as a bit of attr_type::T::accepts.
unsigned kind_of(const AttrValue &a) { return 1u << a.variant().index(); }

class Parser {
public:
  Parser(std::string_view src, std::string_view file, SourceMap *locations)
      : lex_(src, file), locations_(locations) {
    tok_ = lex_.next();
  }

  std::unique_ptr<Graph> parse_file() {
    auto g = std::make_unique<Graph>();
    try {
      parse_graph(*g, 0, nullptr);
      if (tok_.kind != Tok::Eof) fail("expected end of file after the graph, got " + describe(tok_));
    } catch (const ParseError &) {
      throw;
    } catch (const Error &e) {
      // Something the IR or the runtime refused (e.g. a shape): report where we were.
      fail(e.what());
    }
    return g;
  }

private:
  using Scope = std::unordered_map<std::string, Value *>;

  // ---- tokens
  [[noreturn]] void fail(const std::string &msg) const { fail_at(tok_, msg); }
  [[noreturn]] void fail_at(const Token &t, const std::string &msg) const { lex_.fail(t.line, t.col, msg); }

  static std::string describe(const Token &t) {
    switch (t.kind) {
    case Tok::Ident: case Tok::Int: case Tok::Float: return "'" + t.text.substr(0, 64) + "'";
    case Tok::Percent: return "'%" + text::name(t.text).substr(0, 64) + "'";
    case Tok::At: return "'@" + text::name(t.text).substr(0, 64) + "'";
    default: return tok_name(t.kind);
    }
  }

  Token take() {
    Token t = std::move(tok_);
    tok_ = lex_.next();
    return t;
  }
  bool at(Tok k) const { return tok_.kind == k; }
  bool at_ident(std::string_view word) const { return tok_.kind == Tok::Ident && tok_.text == word; }
  bool accept(Tok k) {
    if (!at(k)) return false;
    take();
    return true;
  }
  Token expect(Tok k, const char *what) {
    if (!at(k)) fail(std::string("expected ") + what + ", got " + describe(tok_));
    return take();
  }
  void expect_ident(std::string_view word) {
    if (!at_ident(word)) fail("expected '" + std::string(word) + "', got " + describe(tok_));
    take();
  }
  // True when the token after the current one is `k` (one token of lookahead).
  bool next_is(std::initializer_list<Tok> ks) const {
    Lexer copy = lex_;
    Tok k = copy.next().kind;
    return std::find(ks.begin(), ks.end(), k) != ks.end();
  }

  // ---- numbers
  int64_t parse_int(const Token &t) const {
    if (t.kind != Tok::Int) fail_at(t, "expected an integer, got " + describe(t));
    int64_t v = 0;
    const char *b = t.text.data(), *e = b + t.text.size();
    if (*b == '+') ++b;
    auto r = std::from_chars(b, e, v);
    if (r.ec != std::errc() || r.ptr != e) fail_at(t, "integer " + t.text.substr(0, 64) + " is out of range");
    return v;
  }
  template <class F> F parse_fp(const Token &t) const {
    if (t.kind != Tok::Int && t.kind != Tok::Float) fail_at(t, "expected a number, got " + describe(t));
    const char *b = t.text.data(), *e = b + t.text.size();
    if (*b == '+') ++b;
    F v = 0;
    auto r = std::from_chars(b, e, v);
    if (r.ec != std::errc() || r.ptr != e) fail_at(t, "number " + t.text.substr(0, 64) + " is out of range");
    return v;
  }
  std::vector<int64_t> parse_int_list(Tok open, Tok close, const char *what) {
    expect(open, what);
    std::vector<int64_t> v;
    if (accept(close)) return v;
    do {
      v.push_back(parse_int(take()));
    } while (accept(Tok::Comma));
    expect(close, close == Tok::RBracket ? "']' or ','" : "'}' or ','");
    return v;
  }

  // ---- types: f32[4, 8] or f32[4, 8]{8, 1}
  TensorType parse_type() {
    Token dt = take();
    if (dt.kind != Tok::Ident) fail_at(dt, "expected a type such as f32[4, 8], got " + describe(dt));
    auto d = dtype_named(dt.text);
    if (!d) fail_at(dt, "unknown dtype '" + dt.text.substr(0, 64) + "' (expected i1, u8, i8, i16, i32, i64, f16, bf16, f32 or f64)");
    TensorType t;
    t.dtype = *d;
    Token open = tok_;
    if (at(Tok::LBracket))
      if (std::optional<std::string_view> dims = lex_.bracket_body(); dims && symbolic_text(*dims))
        return parse_symbolic_dims(t, open, *dims);
    auto shape = parse_int_list(Tok::LBracket, Tok::RBracket, "'[' after the dtype");
    check_shape(open, shape);
    t.shape = Dims(shape);
    // '{' starts strides only when an integer or '}' follows; else it opens a group body.
    if (at(Tok::LBrace) && next_is({Tok::Int, Tok::RBrace})) {
      Token st = tok_;
      auto strides = parse_int_list(Tok::LBrace, Tok::RBrace, "'{'");
      if (strides.size() != shape.size())
        fail_at(st, "type has " + std::to_string(shape.size()) + " dims but " + std::to_string(strides.size()) +
                        " strides");
      for (int64_t s : strides)
        if (s > kMaxNumel || s < -kMaxNumel) fail_at(st, "stride " + std::to_string(s) + " is out of range");
      t.strides = Dims(strides);
    }
    return t;
  }
  // Dims with a symbol, a product or a function in them ('2*s0', 'floordiv(s0, 2)').
  static bool symbolic_text(std::string_view dims) {
    return std::any_of(dims.begin(), dims.end(), [](char c) {
      return std::isalpha(static_cast<unsigned char>(c)) || c == '*' || c == '(';
    });
  }

  // f32[s0, 2*s1, 768]: each dim a SymExpr; `shape` their values at the
  // graph's symbols(...), or placeholders until the header has given them.
  TensorType parse_symbolic_dims(TensorType t, const Token &open, std::string_view dims) {
    lex_.skip_bracket_body(dims.size());
    tok_ = lex_.next();
    for (std::string_view dim : split_top_level(dims)) {
      try {
        t.sym.push_back(SymExpr::parse(dim));
      } catch (const Error &e) {
        fail_at(open, std::string("bad symbolic dim: ") + e.what());
      }
      if (t.sym.size() > size_t(kMaxDims))
        fail_at(open, "type has more than " + std::to_string(kMaxDims) + " dims");
    }
    if (at(Tok::LBrace) && next_is({Tok::Int, Tok::RBrace}))
      fail("a type with symbolic dims cannot have strides (not supported yet)");
    t.shape = Dims(std::vector<int64_t>(t.sym.size(), 0));
    if (hints_ready_) t.shape = sizes_at_hints(open, t);
    return t;
  }

  // The symbolic type's sizes at the header's symbols(...).
  Dims sizes_at_hints(const Token &at_tok, const TensorType &t) const {
    std::vector<int64_t> shape;
    for (const SymExpr &e : t.sym) {
      try {
        shape.push_back(e.evaluate(hints_));
      } catch (const Error &err) {
        fail_at(at_tok, std::string(err.what()) + (hints_.empty() ? " (the graph header has no symbols(...))" : ""));
      }
    }
    check_shape(at_tok, shape);
    return Dims(shape);
  }

  // symbols(s0 = 4, s1 = 128): the symbols' values in the traced call, in order.
  void parse_symbols(Graph &g) {
    expect(Tok::LParen, "'(' after 'symbols'");
    std::vector<int64_t> hints;
    do {
      Token name = take();
      const std::string want = "s" + std::to_string(hints.size());
      if (name.kind != Tok::Ident || name.text != want)
        fail_at(name, "expected symbol " + want + " (symbols are s0, s1, ... in order), got " + describe(name));
      expect(Tok::Equal, "'=' and the symbol's value");
      Token v = take();
      const int64_t value = parse_int(v);
      if (value < 0 || value > kMaxDim) fail_at(v, "symbol " + want + " = " + v.text + " is out of range");
      hints.push_back(value);
    } while (accept(Tok::Comma));
    expect(Tok::RParen, "')' or ',' after a symbol");
    g.set_symbol_hints(hints);
    hints_ = std::move(hints);
  }

  void check_shape(const Token &at_tok, const std::vector<int64_t> &shape) const {
    if (shape.size() > size_t(kMaxDims))
      fail_at(at_tok, "type has " + std::to_string(shape.size()) + " dims; at most " + std::to_string(kMaxDims));
    int64_t numel = 1;
    for (int64_t s : shape) {
      if (s < 0 || s > kMaxDim) fail_at(at_tok, "dimension " + std::to_string(s) + " is out of range");
      if (s && numel > kMaxNumel / s) fail_at(at_tok, "shape " + shape_str(shape) + " is too large");
      numel *= s;
    }
  }

  // ---- values
  void define(Scope &scope, const Token &t, Value *v) {
    v->set_name(t.text); // exactly the printed name, registered in the graph
    scope.emplace(t.text, v);
  }
  void check_fresh(const Scope &scope, const Token &t) const {
    if (scope.count(t.text)) fail_at(t, "redefinition of value '%" + text::name(t.text).substr(0, 64) + "'");
  }
  Value *lookup(const Scope &scope, const Token &t) const {
    auto it = scope.find(t.text);
    if (it == scope.end()) fail_at(t, "use of undefined value '%" + text::name(t.text).substr(0, 64) + "'");
    return it->second;
  }
  // %name or none
  Value *parse_operand(const Scope &scope) {
    if (at_ident("none")) {
      take();
      return nullptr;
    }
    Token t = expect(Tok::Percent, "a %value or none");
    return lookup(scope, t);
  }

  // ---- graph
  void parse_graph(Graph &g, int depth, const Node *group) {
    expect_ident("graph");
    g.set_name(expect(Tok::At, "'@name' after 'graph'").text);
    Scope scope;
    Token header = tok_;
    parse_inputs(g, scope, group);
    if (at_ident("symbols")) {
      if (group) fail("symbols(...) belongs in the top-level graph's header; a fusion body uses its graph's");
      take();
      parse_symbols(g);
    }
    if (!group) {
      hints_ready_ = true;
      for (Value *v : g.inputs()) {
        if (!v->type().symbolic()) continue;
        TensorType t = v->type();
        t.shape = sizes_at_hints(header, t);
        v->set_type(std::move(t));
      }
    }
    if (at_ident("params")) {
      take();
      parse_params(g, scope);
    }
    if (at_ident("consts")) {
      take();
      parse_consts(g, scope);
    }
    expect(Tok::LBrace, "'{' to open the graph body");
    while (!at_ident("return")) {
      if (at(Tok::Eof) || at(Tok::RBrace)) fail("unterminated graph @" + text::name(g.name()) + ": expected 'return'");
      if (at_ident("writeback")) parse_write_back(g, scope);
      else if (at_ident("phase")) parse_phase(g);
      else parse_node(g, scope, depth);
    }
    take();
    parse_return(g, scope);
    if (at_ident("memory_plan")) parse_memory_plan(g, scope);
    expect(Tok::RBrace, "'}' after return");
  }

  void parse_inputs(Graph &g, Scope &scope, const Node *group) {
    expect(Tok::LParen, "'(' after the graph name");
    size_t n = 0;
    if (!at(Tok::RParen)) {
      do {
        Token name = expect(Tok::Percent, "an input '%name: type'");
        check_fresh(scope, name);
        expect(Tok::Colon, "':' after the input name");
        TensorType type = parse_type();
        Value *v = nullptr;
        if (group) {
          // A group body's inputs already exist, one per group operand.
          if (n >= g.inputs().size())
            fail_at(name, "fusion body has more inputs than the group has operands (" +
                              std::to_string(g.inputs().size()) + ")");
          v = g.inputs()[n];
          v->set_type(type);
        } else {
          v = g.add_input(type);
        }
        define(scope, name, v);
        ++n;
      } while (accept(Tok::Comma));
    }
    if (group && n != g.inputs().size())
      fail("fusion body has " + std::to_string(n) + " inputs but the group has " +
           std::to_string(g.inputs().size()) + " operands");
    expect(Tok::RParen, "')' or ',' after an input");
  }

  void parse_params(Graph &g, Scope &scope) {
    expect(Tok::LParen, "'(' after 'params'");
    do {
      Token name = expect(Tok::Percent, "a parameter '%name: type'");
      check_fresh(scope, name);
      expect(Tok::Colon, "':' after the parameter name");
      Token type_tok = tok_;
      TensorType type = parse_type();
      if (type.symbolic()) fail_at(type_tok, "a parameter's type cannot have symbolic dims (a captured tensor has its sizes)");
      // No live storage in a file: a META tensor of the type, bound later with bind_param.
      Value *v = g.add_param(detail::make_tensor(type.shape, type.dtype, /*meta=*/true));
      v->set_type(type);
      define(scope, name, v);
    } while (accept(Tok::Comma));
    expect(Tok::RParen, "')' or ',' after a parameter");
  }

  void parse_consts(Graph &g, Scope &scope) {
    expect(Tok::LParen, "'(' after 'consts'");
    do {
      Token name = expect(Tok::Percent, "a constant '%name: type = value'");
      check_fresh(scope, name);
      expect(Tok::Colon, "':' after the constant name");
      Token type_tok = tok_;
      TensorType type = parse_type();
      if (type.symbolic()) fail_at(type_tok, "a constant's type cannot have symbolic dims");
      expect(Tok::Equal, "'=' and the constant's value");
      bool wrapped = false;
      if (at_ident("wrapped")) {
        if (!type.shape.empty()) fail("only a 0-dim constant can be a wrapped number");
        take();
        wrapped = true;
      }
      Tensor t = parse_const_value(type);
      t.impl().wrapped_number = wrapped;
      Value *v = g.add_const(t);
      v->set_type(type);
      define(scope, name, v);
    } while (accept(Tok::Comma));
    expect(Tok::RParen, "')' or ',' after a constant");
  }

  // A scalar for a 0-dim type, else a flat list of numel elements in row-major
  // order, stored as they are read. The tensor is allocated only once the text
  // left can hold its elements (each takes at least 2 characters, "0,"), so a
  // type claiming more elements than the file has costs no memory.
  Tensor parse_const_value(const TensorType &type) {
    int64_t numel = type.numel();
    const int64_t size = itemsize(type.dtype);
    if (type.shape.empty()) {
      Tensor t = detail::make_tensor(type.shape, type.dtype);
      store_element(type.dtype, take(), static_cast<char *>(t.raw_data()));
      return t;
    }
    Token start = tok_;
    expect(Tok::LBracket, "'[' and the constant's elements");
    int64_t room = 1 + int64_t(lex_.remaining() / 2);
    if (numel > room)
      fail_at(start, "constant of type " + type.str() + " needs " + std::to_string(numel) +
                         " elements, more than the rest of the text (" + std::to_string(lex_.remaining()) +
                         " bytes) can hold");
    Tensor t = detail::make_tensor(type.shape, type.dtype);
    char *p = static_cast<char *>(t.raw_data());
    int64_t n = 0;
    if (!at(Tok::RBracket)) {
      do {
        if (n >= numel) fail("constant of type " + type.str() + " has more than " + std::to_string(numel) + " elements");
        store_element(type.dtype, take(), p + n * size);
        ++n;
      } while (accept(Tok::Comma));
    }
    expect(Tok::RBracket, "']' or ','");
    if (n != numel)
      fail_at(start, "constant of type " + type.str() + " needs " + std::to_string(numel) + " elements, got " +
                         std::to_string(n));
    return t;
  }

  // An integer element of a narrower dtype than int64, range-checked.
  template <class T> void store_int(const Token &e, char *p) const {
    const int64_t v = parse_int(e);
    if (v < int64_t(std::numeric_limits<T>::min()) || v > int64_t(std::numeric_limits<T>::max()))
      fail_at(e, "integer " + e.text + " does not fit in " + std::string(short_name(dtype_of<T>)));
    const T x = T(v);
    std::memcpy(p, &x, sizeof x);
  }

  // A float16 / bfloat16 element: parsed as float32 and rounded (the printer writes
  // the float32 value of the element, which round-trips exactly).
  template <class T> void store_reduced(const Token &e, char *p) const {
    const T x(parse_fp<float>(e));
    std::memcpy(p, &x, sizeof x);
  }

  void store_element(DType dt, const Token &e, char *p) const {
    switch (dt) {
    case DType::Bool: {
      if (e.kind != Tok::Ident || (e.text != "true" && e.text != "false"))
        fail_at(e, "expected true or false, got " + describe(e));
      bool b = e.text == "true";
      std::memcpy(p, &b, 1);
      return;
    }
    case DType::Int32: return store_int<int32_t>(e, p);
    case DType::UInt8: return store_int<uint8_t>(e, p);
    case DType::Int8: return store_int<int8_t>(e, p);
    case DType::Int16: return store_int<int16_t>(e, p);
    case DType::Int64: {
      int64_t v = parse_int(e);
      std::memcpy(p, &v, 8);
      return;
    }
    case DType::Float32: {
      float v = parse_fp<float>(e);
      std::memcpy(p, &v, 4);
      return;
    }
    case DType::Float64: {
      double v = parse_fp<double>(e);
      std::memcpy(p, &v, 8);
      return;
    }
    case DType::Float16: return store_reduced<Half>(e, p);
    case DType::BFloat16: return store_reduced<BFloat16>(e, p);
    }
  }

  void parse_write_back(Graph &g, const Scope &scope) {
    take();
    Token target = expect(Tok::Percent, "the written-back '%value'");
    expect(Tok::Arrow, "'<-'");
    Token value = expect(Tok::Percent, "the '%value' written back");
    g.add_write_back(lookup(scope, target), lookup(scope, value));
  }

  // phase forward|backward|update: the phase of the nodes that follow.
  void parse_phase(Graph &g) {
    take();
    Token name = expect(Tok::Ident, "a phase (forward, backward or update)");
    std::optional<StepPhase> p = step_phase_named(name.text);
    if (!p) fail_at(name, "unknown phase '" + name.text.substr(0, 64) + "' (forward, backward or update)");
    g.set_append_phase(*p);
  }

  // memory_plan {peak_bytes = N} { %v {buffer = b, offset = o, size = s} ... }
  // Consistency (alignment, overlap, liveness) is the verifier's job.
  void parse_memory_plan(Graph &g, const Scope &scope) {
    take();
    MemoryPlan plan;
    expect(Tok::LBrace, "'{' after memory_plan");
    plan.peak_bytes = plan_field("peak_bytes");
    if (accept(Tok::Comma)) { // a symbolic plan: its formulas follow the values at the traced sizes
      plan.symbolic = true;
      plan.sym_peak = plan_formula("sym_peak");
    }
    expect(Tok::RBrace, plan.symbolic ? "'}' after sym_peak" : "'}' or ',' after peak_bytes");
    expect(Tok::LBrace, "'{' and the memory plan's entries");
    while (!accept(Tok::RBrace)) {
      if (at(Tok::Eof)) fail("unterminated memory_plan: expected '}'");
      Token name = expect(Tok::Percent, "a planned '%value' or '}'");
      Value *v = lookup(scope, name);
      BufferAssignment a;
      expect(Tok::LBrace, "'{' after the planned value");
      a.buffer = plan_field("buffer");
      expect(Tok::Comma, "','");
      a.offset = plan_field("offset");
      expect(Tok::Comma, "','");
      a.size = plan_field("size");
      if (plan.symbolic) {
        expect(Tok::Comma, "',' and sym_offset (the plan is symbolic)");
        a.sym_offset = plan_formula("sym_offset");
        expect(Tok::Comma, "','");
        const Token at_size = tok_;
        SymMax size = plan_formula("sym_size");
        if (size.terms.size() > 1) fail_at(at_size, "sym_size is one formula, not a max");
        if (!size.terms.empty()) a.sym_size = size.terms[0];
      }
      expect(Tok::RBrace, plan.symbolic ? "'}' after sym_size" : "'}' after size");
      plan.entries.emplace_back(v, a);
    }
    g.set_memory_plan(std::move(plan));
  }
  // name = [formula]: a size over the symbols, or max(a, b, ...).
  SymMax plan_formula(std::string_view name) {
    expect_ident(name);
    expect(Tok::Equal, "'='");
    const Token open = tok_;
    if (!at(Tok::LBracket)) fail_at(open, std::string("expected '[' and a formula after ") + std::string(name) + " =");
    std::optional<std::string_view> body = lex_.bracket_body();
    if (!body) fail_at(open, std::string("unterminated ") + std::string(name) + ": expected ']' on the same line");
    lex_.skip_bracket_body(body->size());
    tok_ = lex_.next();
    try {
      return SymMax::parse(*body);
    } catch (const Error &e) {
      fail_at(open, std::string("bad ") + std::string(name) + ": " + e.what());
    }
  }
  int64_t plan_field(std::string_view name) {
    expect_ident(name);
    expect(Tok::Equal, "'='");
    Token t = take();
    int64_t v = parse_int(t);
    if (v < 0 || v > kMaxNumel * 8) fail_at(t, std::string(name) + " " + t.text + " is out of range");
    return v;
  }

  void parse_return(Graph &g, const Scope &scope) {
    std::vector<Value *> outs;
    if (at(Tok::Percent) || at_ident("none")) {
      do {
        outs.push_back(parse_operand(scope));
      } while (accept(Tok::Comma));
    }
    g.set_outputs(std::move(outs));
  }

  // ---- nodes: [%a, %b =] op(%x, none) [{name = value, ...}] [: type, type] [{ graph ... }]
  void parse_node(Graph &g, Scope &scope, int depth) {
    const SourceLoc start{tok_.line, tok_.col};
    std::vector<Token> results;
    if (at(Tok::Percent)) {
      do {
        results.push_back(expect(Tok::Percent, "a result '%name'"));
        check_fresh(scope, results.back());
        for (size_t i = 0; i + 1 < results.size(); ++i)
          if (results[i].text == results.back().text) fail_at(results.back(), "result defined twice");
      } while (accept(Tok::Comma));
      expect(Tok::Equal, "'=' after the results");
    }
    Token op = expect(Tok::Ident, "an op name");
    const OpInfo *info = nullptr;
    bool group = op.text == "fusion_group";
    if (!group) {
      info = find_op(op.text);
      if (!info) fail_at(op, "unknown op '" + op.text.substr(0, 64) + "'" + did_you_mean(op.text, all_mnemonics()));
    }
    expect(Tok::LParen, "'(' after the op name");
    std::vector<Value *> operands;
    if (!at(Tok::RParen)) {
      do {
        operands.push_back(parse_operand(scope));
      } while (accept(Tok::Comma));
    }
    expect(Tok::RParen, "')' or ',' after an operand");
    Attrs attrs;
    if (info) {
      check_arity(op, *info, operands.size());
      attrs = parse_attrs(op, *info);
    }
    std::vector<TensorType> types;
    if (accept(Tok::Colon)) {
      do {
        types.push_back(parse_type());
      } while (accept(Tok::Comma));
    }
    if (types.size() != results.size())
      fail_at(op, std::to_string(results.size()) + " results but " + std::to_string(types.size()) +
                      " result types");
    Node *n = nullptr;
    if (group) {
      n = parse_group(g, op, std::move(operands), types, depth);
    } else {
      n = g.create(info->id, std::move(operands), std::move(attrs), types);
    }
    for (size_t i = 0; i < results.size(); ++i) define(scope, results[i], n->result(i));
    if (locations_) (*locations_)[n] = start;
  }

  void check_arity(const Token &op, const OpInfo &info, size_t n) const {
    Arity a = op_arity(info.id);
    if (n >= a.min && n <= a.max) return;
    std::string want = a.min == a.max ? std::to_string(a.min)
                       : a.max == kVariadic ? "at least " + std::to_string(a.min)
                                            : std::to_string(a.min) + " to " + std::to_string(a.max);
    fail_at(op, std::string(info.mnemonic) + " takes " + want + " operands, got " + std::to_string(n));
  }

  Node *parse_group(Graph &g, const Token &op, std::vector<Value *> operands, const std::vector<TensorType> &types,
                    int depth) {
    for (Value *v : operands)
      if (!v) fail_at(op, "fusion_group operands cannot be none");
    if (depth + 1 > kMaxGroupDepth)
      fail_at(op, "fusion groups nested more than " + std::to_string(kMaxGroupDepth) + " deep");
    expect(Tok::LBrace, "'{' and the fusion body");
    Node *n = g.create_group(std::move(operands), types);
    parse_graph(*n->body(), depth + 1, n);
    expect(Tok::RBrace, "'}' to close the fusion group");
    return n;
  }

  Attrs parse_attrs(const Token &op, const OpInfo &info) {
    const auto &names = info.attr_names;
    Attrs attrs(names.size());
    std::vector<bool> seen(names.size(), false);
    if (at(Tok::LBrace)) {
      take();
      if (!at(Tok::RBrace)) {
        do {
          parse_one_attr(info, attrs, seen);
        } while (accept(Tok::Comma));
      }
      expect(Tok::RBrace, "'}' or ',' after an attribute");
    }
    for (size_t i = 0; i < names.size(); ++i)
      if (!seen[i])
        fail_at(op, std::string(info.mnemonic) + " needs attribute '" + std::string(names[i]) +
                        "' (every attribute is written; an absent one as none)");
    return attrs;
  }

  void parse_one_attr(const OpInfo &info, Attrs &attrs, std::vector<bool> &seen) {
    const auto &names = info.attr_names;
    Token name = expect(Tok::Ident, "an attribute name");
    auto it = std::find(names.begin(), names.end(), name.text);
    if (it == names.end()) {
      std::string msg = std::string(info.mnemonic) + " has no attribute '" + name.text.substr(0, 64) + "'";
      msg += names.empty() ? " (it has none)" : did_you_mean(name.text, names);
      fail_at(name, msg);
    }
    size_t i = size_t(it - names.begin());
    if (seen[i]) fail_at(name, "attribute '" + name.text + "' given twice");
    seen[i] = true;
    expect(Tok::Equal, "'=' after the attribute name");
    Token vt = tok_;
    attrs[i] = parse_attr_value();
    // What the attribute's type in ops.def accepts (its accessor reads exactly these).
    if (!(kind_of(attrs[i]) & info.attr_accepts[i]))
      fail_at(vt, "attribute '" + name.text + "' of " + std::string(info.mnemonic) + " must be " +
                      std::string(info.attr_what[i]));
  }

  AttrValue parse_attr_value() {
    switch (tok_.kind) {
    case Tok::Int: return AttrValue(parse_int(take()));
    case Tok::Float: return AttrValue(parse_fp<double>(take()));
    case Tok::String: return AttrValue(take().text);
    case Tok::LBracket: return AttrValue(parse_int_list(Tok::LBracket, Tok::RBracket, "'['"));
    case Tok::Ident: {
      Token t = take();
      if (t.text == "none") return AttrValue();
      if (t.text == "true") return AttrValue(true);
      if (t.text == "false") return AttrValue(false);
      if (auto d = dtype_named(t.text)) return AttrValue(*d);
      fail_at(t, "expected an attribute value (number, bool, [ints], \"string\", dtype or none), got " +
                     describe(t));
    }
    default:
      fail("expected an attribute value (number, bool, [ints], \"string\", dtype or none), got " + describe(tok_));
    }
  }

  Lexer lex_;
  // The top-level graph's symbols(...) values; ready once its header is read.
  std::vector<int64_t> hints_;
  bool hints_ready_ = false;
  Token tok_;
  SourceMap *locations_;
};

} // namespace

namespace {
std::string over_limit(uint64_t bytes, bool at_least) {
  return std::string(at_least ? "more than " : "") + std::to_string(bytes) + " bytes of IR text, over the limit of " +
         std::to_string(kMaxTextBytes);
}
} // namespace

std::string read_text(std::istream &in, std::string &out) {
  out.clear();
  char buf[1 << 16];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    out.append(buf, size_t(in.gcount()));
    if (out.size() > kMaxTextBytes) {
      out.clear();
      return over_limit(kMaxTextBytes, true);
    }
  }
  return in.bad() ? "cannot read the file" : "";
}

std::string read_text_file(const std::string &path, std::string &out) {
  // A directory opens as a stream on Linux and fails only when read.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return "is a directory";
  std::ifstream f(path, std::ios::binary);
  if (!f) return "cannot read the file";
  uint64_t size = std::filesystem::file_size(path, ec); // fails for pipes: read_text bounds those
  if (!ec && size > kMaxTextBytes) return over_limit(size, false);
  return read_text(f, out);
}

std::unique_ptr<Graph> parse(std::string_view text, std::string_view filename) {
  return parse(text, filename, nullptr);
}

std::unique_ptr<Graph> parse(std::string_view text, std::string_view filename, SourceMap *locations) {
  if (text.size() > kMaxTextBytes)
    throw Error(std::string(filename) + ": " + over_limit(text.size(), false));
  return Parser(text, filename, locations).parse_file();
}

} // namespace kiln::ir
