// kiln: the command line of the compiler.
//
//   kiln list
//   kiln run <example> [--eager|--compiled] [--threads N]
//   kiln dump <example> [--after-all|--after=PASS|--before=PASS] [--format=text|dot] [--out DIR] [--dynamic]
//             [--kernels|--llvm|--asm]
//   kiln bench <example>...|all [--threads N] [--repeat N] [--gemm jit|blas|both] [--json FILE] [--trace FILE]
//   kiln run|dump|bench FILE.kir [--seed N] [--params W.safetensors] [--inputs X.safetensors] ...
//
// Bad usage (unknown command, example, pass or flag, malformed number,
// unwritable --out/--json) prints one line and the usage to stderr and exits 2;
// a failure while running exits 1. Nothing escapes main as an exception.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "codegen/executable.h"
#include "codegen/op_lowering.h"
#include "example.h"
#include "frontend/bench.h"
#include "frontend/symbolize.h"
#include "ir/interpreter.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "passes/dump_names.h"
#include "passes/plan_memory.h"
#include "runtime/safetensors.h"

namespace {

namespace fs = std::filesystem;
using kiln::Tensor;

constexpr const char *kUsage =
    "usage: kiln <command> [options]\n"
    "  list                                      the examples, one line each\n"
    "  run <example> [--eager|--compiled] [--threads N]\n"
    "                                            output shapes, checksum, max |compiled - eager|;\n"
    "                                            both paths run, --eager/--compiled picks the one shown\n"
    "  dump <example> [--after-all|--after=PASS|--before=PASS] [--format=text|dot] [--out DIR] [--dynamic]\n"
    "                 [--kernels|--llvm|--asm]   IR between passes (default: the final IR), a summary;\n"
    "                                            --kernels/--llvm/--asm: JIT dumps (KILN_DUMP) on stderr;\n"
    "                                            --dynamic: every input dim symbolic where the graph\n"
    "                                            allows (the symbolic IR, and each group's kernel)\n"
    "  bench <example>...|all [--threads N] [--repeat N] [--gemm jit|blas|both] [--json FILE] [--trace FILE]\n"
    "                                            eager vs compiled table; --repeat: timed calls (default\n"
    "                                            20, at least 5 but at most ~1 s per phase);\n"
    "                                            --gemm: compiled contractions through kiln's JIT GEMM or\n"
    "                                            OpenBLAS (default: $KILN_GEMM, else jit); both: a row each\n"
    "                                            --trace: Chrome trace (Perfetto, chrome://tracing) of the\n"
    "                                            phases and of one compiled call, a slice per kernel/BLAS call\n"
    "  bench <example>...|all --dynamic [--repeat N] [--threads N]\n"
    "                                            100 calls with the batch drawn from 1..64: one function\n"
    "                                            compiled with dynamic shapes (its compiles, time per call)\n"
    "                                            vs a static specialization per size; --repeat: passes (5)\n"
    "  run|dump|bench FILE.kir [--seed N] [--params W.safetensors] [--inputs X.safetensors] [options above]\n"
    "                                            a graph file (the IR's text form, e.g. a KILN_DUMP_DIR dump)\n"
    "                                            instead of an example: the interpreter is the eager path;\n"
    "                                            inputs and parameters are random from --seed (default 0)\n"
    "                                            or bound by name from safetensors files\n"
    "an example is named in full or by its id before the first '-' (w5 = w5-gpt2-block)\n"
    "compiled kernels are cached in $KILN_CACHE_DIR (default ~/.cache/kiln; KILN_CACHE_DIR= turns it off)\n";

// Bad usage: reported with the usage text and exit code 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Args {
  std::string command;
  std::string target; // example name (or "all" for bench): the first of targets
  std::vector<std::string> targets; // bench takes several
  std::string mode = "both";
  int threads = 0; // 0: leave the runtime default
  int repeat = 20;
  bool repeat_given = false; // --repeat N: exactly N timed calls, no time cap
  std::vector<std::string> after, before;
  bool dynamic = false; // dump --dynamic: every input dim symbolic where the graph allows
  std::string format = "text";
  std::string out_dir, json_file, trace_file, jit_dump;
  std::vector<kiln::gemm::Path> gemm; // --gemm; empty: the current path (KILN_GEMM)
  // Graph files only (FILE.kir).
  std::optional<uint64_t> seed;
  std::string params_file, inputs_file;
};

bool starts_with(const std::string &s, std::string_view p) { return s.rfind(p, 0) == 0; }

int parse_positive(const std::string &flag, const std::string &text) {
  size_t used = 0;
  long v = 0;
  try {
    v = std::stol(text, &used);
  } catch (const std::exception &) {
    throw UsageError(flag + " expects a positive integer, got '" + text + "'");
  }
  if (used != text.size() || v < 1 || v > 1 << 20)
    throw UsageError(flag + " expects a positive integer, got '" + text + "'");
  return int(v);
}

uint64_t parse_seed(const std::string &text) {
  size_t used = 0;
  unsigned long long v = 0;
  try {
    v = std::stoull(text, &used);
  } catch (const std::exception &) {
    used = 0;
  }
  if (used == 0 || used != text.size() || text[0] == '-')
    throw UsageError("--seed expects a non-negative integer, got '" + text + "'");
  return v;
}

std::vector<kiln::gemm::Path> parse_gemm(const std::string &text) {
  try {
    return kiln::parse_bench_gemm(text);
  } catch (const kiln::Error &e) {
    throw UsageError(e.what());
  }
}

// "--flag VALUE" or "--flag=VALUE"; advances i past a separate value.
bool take_value(const std::vector<std::string> &a, size_t &i, const std::string &flag, std::string &out) {
  if (a[i] == flag) {
    if (i + 1 >= a.size()) throw UsageError("missing value after " + flag);
    out = a[++i];
    return true;
  }
  if (starts_with(a[i], flag + "=")) {
    out = a[i].substr(flag.size() + 1);
    if (out.empty()) throw UsageError("missing value in '" + a[i] + "'");
    return true;
  }
  return false;
}

// Flags valid for `cmd`; anything else is a usage error.
bool flag_allowed(const std::string &cmd, const std::string &flag) {
  static const std::map<std::string, std::vector<std::string>> allowed = {
      {"list", {}},
      {"run", {"--eager", "--compiled", "--threads", "--seed", "--params", "--inputs"}},
      {"dump", {"--after-all", "--after", "--before", "--format", "--out", "--kernels", "--llvm", "--asm", "--seed",
                "--params", "--inputs", "--dynamic"}},
      {"bench", {"--threads", "--repeat", "--gemm", "--json", "--trace", "--seed", "--params", "--inputs", "--dynamic"}},
  };
  std::string name = flag.substr(0, flag.find('='));
  for (const std::string &f : allowed.at(cmd))
    if (f == name) return true;
  return false;
}

void parse_flag(const std::vector<std::string> &a, size_t &i, Args &o) {
  std::string v;
  const std::string &f = a[i];
  if (!flag_allowed(o.command, f)) throw UsageError("unknown option '" + f + "' for '" + o.command + "'");
  if (f == "--eager" || f == "--compiled") o.mode = f.substr(2);
  else if (f == "--after-all") o.after.push_back("*");
  else if (f == "--dynamic") o.dynamic = true;
  else if (f == "--kernels" || f == "--llvm" || f == "--asm") o.jit_dump = f.substr(2);
  else if (take_value(a, i, "--threads", v)) o.threads = parse_positive("--threads", v);
  else if (take_value(a, i, "--repeat", v)) o.repeat = parse_positive("--repeat", v), o.repeat_given = true;
  else if (take_value(a, i, "--gemm", v)) o.gemm = parse_gemm(v);
  else if (take_value(a, i, "--after", v)) o.after.push_back(v);
  else if (take_value(a, i, "--before", v)) o.before.push_back(v);
  else if (take_value(a, i, "--format", v)) o.format = v;
  else if (take_value(a, i, "--out", v)) o.out_dir = v;
  else if (take_value(a, i, "--json", v)) o.json_file = v;
  else if (take_value(a, i, "--trace", v)) o.trace_file = v;
  else if (take_value(a, i, "--seed", v)) o.seed = parse_seed(v);
  else if (take_value(a, i, "--params", v)) o.params_file = v;
  else if (take_value(a, i, "--inputs", v)) o.inputs_file = v;
  else throw UsageError("option '" + f + "' needs a value");
}

// ---- graph files (FILE.kir)

// The example named `name`, or the one whose name starts with `name` and a '-'
// (its id: "w5" is w5-gpt2-block); nullptr when none or several match.
const kiln::examples::Example *find_example_or_id(const std::string &name) {
  if (const kiln::examples::Example *ex = kiln::examples::find_example(name)) return ex;
  const kiln::examples::Example *found = nullptr;
  for (const auto &e : kiln::examples::all_examples()) {
    if (!starts_with(e.name, name + "-")) continue;
    if (found) return nullptr; // ambiguous
    found = &e;
  }
  return found;
}

// A target is a graph file when it ends in .kir, or names an existing file that is no example.
bool is_graph_file(const std::string &target) {
  if (target.size() > 4 && target.ends_with(".kir")) return true;
  std::error_code ec;
  return !find_example_or_id(target) && fs::is_regular_file(target, ec);
}

void check_graph_file_flags(const Args &o) {
  for (const std::string &t : o.targets)
    if (t != "all" && is_graph_file(t)) return;
  for (const auto &[flag, set] : {std::pair{"--seed", o.seed.has_value()}, std::pair{"--params", !o.params_file.empty()},
                                  std::pair{"--inputs", !o.inputs_file.empty()}})
    if (set) throw UsageError(std::string(flag) + " applies to graph files (FILE.kir), not to '" + o.target + "'");
}

Args parse_args(int argc, char **argv) {
  std::vector<std::string> a(argv + 1, argv + argc);
  if (a.empty()) throw UsageError("missing command");
  Args o;
  o.command = a[0];
  if (o.command != "list" && o.command != "run" && o.command != "dump" && o.command != "bench")
    throw UsageError("unknown command '" + o.command + "'");
  for (size_t i = 1; i < a.size(); ++i) {
    if (starts_with(a[i], "-")) parse_flag(a, i, o);
    else if (o.targets.empty() || o.command == "bench") o.targets.push_back(a[i]);
    else throw UsageError("unexpected argument '" + a[i] + "'");
  }
  if (!o.targets.empty()) o.target = o.targets.front();
  if (o.targets.size() > 1 && std::find(o.targets.begin(), o.targets.end(), "all") != o.targets.end())
    throw UsageError("'all' names every example: give it alone");
  if (o.command != "list" && o.target.empty()) throw UsageError("'" + o.command + "' needs an example name");
  if (o.command == "list" && !o.target.empty()) throw UsageError("unexpected argument '" + o.target + "'");
  if (o.format != "text" && o.format != "dot") throw UsageError("--format must be text or dot, got '" + o.format + "'");
  check_graph_file_flags(o);
  return o;
}

const kiln::examples::Example &example_or_throw(const std::string &name) {
  if (const kiln::examples::Example *ex = find_example_or_id(name)) return *ex;
  std::string several;
  for (const auto &e : kiln::examples::all_examples())
    if (starts_with(e.name, name + "-")) several += (several.empty() ? "" : ", ") + e.name;
  if (!several.empty()) throw UsageError("'" + name + "' names several examples: " + several);
  throw UsageError("unknown example '" + name + "' (see 'kiln list')");
}

// Random values for a graph input or parameter of type `t`: normal floats,
// integers in [0, 10) (valid indices for most index operands), fair bools.
// Float parameters are scaled by 1/sqrt(last dim), the scale of nn.Linear's
// init, so that activations through a chain of linears stay near 1 (with N(0, 1)
// weights a GPT-2 block's outputs reach ~1e4 and float rounding shows as a
// large absolute difference between compiled and eager).
Tensor random_tensor(const kiln::ir::TensorType &t, bool parameter) {
  const kiln::Dims &shape = t.shape;
  switch (t.dtype) {
  case kiln::DType::Bool: return kiln::randint(0, 2, shape, kiln::kInt64).to(kiln::kBool);
  case kiln::DType::UInt8:
  case kiln::DType::Int8:
  case kiln::DType::Int16:
  case kiln::DType::Int32:
  case kiln::DType::Int64: return kiln::randint(0, 10, shape, t.dtype);
  case kiln::DType::Float16:
  case kiln::DType::BFloat16:
  case kiln::DType::Float32:
  case kiln::DType::Float64: {
    Tensor x = kiln::randn(shape, t.dtype);
    if (!parameter || shape.size() == 0 || shape[shape.size() - 1] == 0) return x;
    return x.mul_(1.0 / std::sqrt(double(shape[shape.size() - 1])));
  }
  }
  throw std::logic_error("random_tensor: bad dtype");
}

// The tensor named like `v` (an input or parameter, `what`) in a safetensors
// file, which must have v's dtype and shape.
Tensor tensor_for(const std::map<std::string, Tensor> &file, const std::string &file_name, const kiln::ir::Value &v,
                  const char *what) {
  auto it = file.find(v.name());
  if (it == file.end())
    throw kiln::Error(file_name + ": no tensor named '" + v.name() + "' for " + what + " %" + v.name() + " (" +
                      v.type().str() + ")");
  const Tensor &t = it->second;
  if (t.dtype() != v.type().dtype || t.sizes() != kiln::IntArrayRef(v.type().shape))
    throw kiln::Error(std::string(what) + " %" + v.name() + " is " + v.type().str() + ", but tensor '" + v.name() +
                      "' in " + file_name + " is " + kiln::ir::TensorType::of(t).str());
  return t;
}

// One tensor per value of `values`: from `file_name` when given (every value
// must be there; other tensors of the file are listed on stderr), else random.
std::vector<Tensor> bind_values(const std::vector<kiln::ir::Value *> &values, const std::string &file_name,
                                const char *what) {
  std::vector<Tensor> out;
  if (file_name.empty()) {
    for (const kiln::ir::Value *v : values) out.push_back(random_tensor(v->type(), v->kind() == kiln::ir::Value::Kind::Param));
    return out;
  }
  std::map<std::string, Tensor> file = kiln::load_safetensors(file_name);
  for (const kiln::ir::Value *v : values) {
    out.push_back(tensor_for(file, file_name, *v, what));
    file.erase(v->name());
  }
  for (const auto &[name, t] : file)
    std::fprintf(stderr, "kiln: note: tensor '%s' of %s is no %s of the graph\n", name.c_str(), file_name.c_str(), what);
  return out;
}

std::shared_ptr<kiln::ir::Graph> read_graph_file(const std::string &path) {
  if (!std::ifstream(path)) throw UsageError("cannot read graph file '" + path + "'");
  std::string text; // untrusted: at most kiln::ir::kMaxTextBytes, checked before reading
  if (std::string why = kiln::ir::read_text_file(path, text); !why.empty()) throw kiln::Error(path + ": " + why);
  std::shared_ptr<kiln::ir::Graph> g = kiln::ir::parse(text, path);
  kiln::ir::verify(*g);
  return g;
}

// A graph file as an example: its model function runs the graph through the
// interpreter (the eager path; compile() traces it back into the same graph),
// its parameters bound to tensors from --params or --seed, its inputs from
// --inputs or --seed (inputs first, then parameters, in graph order).
kiln::examples::Example graph_file_example(const Args &o, const std::string &path) {
  std::shared_ptr<kiln::ir::Graph> g = read_graph_file(path);
  uint64_t seed = o.seed.value_or(0);
  std::ostringstream desc;
  desc << "graph @" << g->name() << " (" << g->inputs().size() << " inputs, " << g->params().size()
       << " parameters, " << g->num_nodes() << " nodes); inputs "
       << (o.inputs_file.empty() ? "random (seed " + std::to_string(seed) + ")" : "from " + o.inputs_file)
       << ", parameters "
       << (o.params_file.empty() ? "random (seed " + std::to_string(seed) + ")" : "from " + o.params_file);
  auto make = [g, seed, params = o.params_file, inputs = o.inputs_file] {
    kiln::manual_seed(seed);
    kiln::examples::Workload w;
    w.inputs = bind_values(g->inputs(), inputs, "input");
    std::vector<Tensor> p = bind_values(g->params(), params, "parameter");
    for (size_t i = 0; i < p.size(); ++i) g->bind_param(g->params()[i], p[i]);
    w.fn = [g](const std::vector<Tensor> &in) { return kiln::ir::interpret(*g, in); };
    return w;
  };
  return {path, desc.str(), make};
}

// The built-in example named by `target`, or the graph file it names.
kiln::examples::Example example_or_file(const Args &o, const std::string &target) {
  if (is_graph_file(target)) return graph_file_example(o, target);
  return example_or_throw(target);
}
kiln::examples::Example example_or_file(const Args &o) { return example_or_file(o, o.target); }

double max_abs_diff(const std::vector<Tensor> &a, const std::vector<Tensor> &b) {
  double d = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    d = std::max(d, kiln::amax(kiln::abs(a[i].to(kiln::kFloat64) - b[i].to(kiln::kFloat64))).item<double>());
  return d;
}

// ---- list, run

int cmd_list() {
  for (const auto &e : kiln::examples::all_examples()) std::printf("%-18s %s\n", e.name.c_str(), e.description.c_str());
  return 0;
}

int cmd_run(const Args &o) {
  const kiln::examples::Example ex = example_or_file(o);
  kiln::examples::Workload w = ex.make();
  std::vector<Tensor> eager = w.fn(w.inputs);
  // A training step changes its parameters: the compiled step runs on a twin
  // made alike, so both take the same first step.
  kiln::examples::Workload twin = w.params.empty() ? w : ex.make();
  kiln::CompiledFunction f = kiln::compile(twin.fn);
  std::vector<Tensor> compiled = f(twin.inputs);
  const std::vector<Tensor> &shown = o.mode == "eager" ? eager : compiled;
  std::printf("%s: %s\n", ex.name.c_str(), ex.description.c_str());
  for (size_t i = 0; i < shown.size(); ++i) {
    std::ostringstream dt;
    dt << shown[i].dtype();
    std::printf("  output %zu: %s%s\n", i, dt.str().c_str(), kiln::shape_str(shown[i].sizes()).c_str());
  }
  std::printf("  checksum (%s): %.6f\n", o.mode == "eager" ? "eager" : "compiled", kiln::examples::checksum(shown));
  if (o.mode == "both") std::printf("  checksum (eager): %.6f\n", kiln::examples::checksum(eager));
  std::printf("  max abs difference compiled vs eager: %.3g\n", max_abs_diff(compiled, eager));
  std::printf("  threads: %d, kernels per compiled call: %lld\n", kiln::get_num_threads(),
              (long long)f.kernels_per_call(twin.inputs));
  return 0;
}

// ---- dump

std::string dot_escape(const std::string &s) {
  std::string r;
  for (char c : s) {
    if (c == '"' || c == '\\') r += '\\';
    r += c;
  }
  return r;
}

// Graphviz: one node per IR node (and per graph input/param/const), edges from
// operands, each fusion group a cluster holding its body's nodes.
class DotWriter {
public:
  explicit DotWriter(std::ostream &os) : os_(os) {}

  void write(const kiln::ir::Graph &g, const std::string &title) {
    os_ << "digraph \"" << dot_escape(title) << "\" {\n  node [shape=box, fontname=monospace];\n";
    for (const auto *list : {&g.inputs(), &g.params(), &g.consts()})
      for (const kiln::ir::Value *v : *list) leaf(v, "ellipse", "  ");
    nodes(g, "  ");
    for (const kiln::ir::Value *v : g.outputs()) os_ << "  " << id_of(v) << " -> out [style=dashed];\n";
    os_ << "  out [shape=doublecircle, label=\"return\"];\n}\n";
  }

private:
  std::ostream &os_;
  std::map<const kiln::ir::Value *, std::string> ids_;
  int next_ = 0;
  int clusters_ = 0;

  std::string fresh() {
    std::string id = "n"; // appended, not "n" + ...: GCC 12 warns falsely (-Wrestrict) on that form
    id += std::to_string(next_++);
    return id;
  }
  std::string id_of(const kiln::ir::Value *v) {
    auto it = ids_.find(v);
    return it == ids_.end() ? std::string("unknown") : it->second;
  }

  void leaf(const kiln::ir::Value *v, const char *shape, const std::string &ind) {
    std::string id = fresh();
    ids_[v] = id;
    os_ << ind << id << " [shape=" << shape << ", label=\"%" << dot_escape(v->name()) << "\\n"
        << dot_escape(v->type().str()) << "\"];\n";
  }

  void edges_in(const kiln::ir::Node &n, const std::string &id, const std::string &ind) {
    for (const kiln::ir::Value *v : n.operands())
      if (v) os_ << ind << id_of(v) << " -> " << id << ";\n";
  }

  void nodes(const kiln::ir::Graph &g, const std::string &ind) {
    for (const kiln::ir::Node *n : g.nodes()) {
      if (n->kind() == kiln::ir::Node::Kind::FusionGroup) {
        group(*n, ind);
        continue;
      }
      std::string id = fresh(), label;
      for (const kiln::ir::Value *r : n->results()) {
        ids_[r] = id;
        label += "%" + r->name() + " ";
      }
      label += "= " + std::string(n->mnemonic());
      os_ << ind << id << " [label=\"" << dot_escape(label);
      if (!n->results().empty()) os_ << "\\n" << dot_escape(n->result()->type().str()); // a dot line break
      os_ << "\"];\n";
      edges_in(*n, id, ind);
    }
  }

  // The body's inputs stand for the group's operands; the group's results for the body's outputs.
  void group(const kiln::ir::Node &n, const std::string &ind) {
    const kiln::ir::Graph &body = *n.body();
    // Labelled as the text dump's line: "%86 = fusion_group", the name logs and traces use.
    std::string label;
    for (const kiln::ir::Value *r : n.results()) label.append(label.empty() ? "%" : ", %").append(r->name());
    label.append(label.empty() ? "" : " = ").append("fusion_group");
    os_ << ind << "subgraph cluster_" << clusters_++ << " {\n"
        << ind << "  label=\"" << dot_escape(label) << "\";\n"
        << ind << "  style=rounded;\n"
        << ind << "  color=blue;\n";
    for (size_t i = 0; i < body.inputs().size() && i < n.operands().size(); ++i)
      if (n.operand(i)) ids_[body.inputs()[i]] = id_of(n.operand(i));
    for (const auto *list : {&body.params(), &body.consts()})
      for (const kiln::ir::Value *v : *list) leaf(v, "ellipse", ind + "  ");
    nodes(body, ind + "  ");
    os_ << ind << "}\n";
    for (size_t j = 0; j < n.results().size() && j < body.outputs().size(); ++j)
      ids_[n.result(j)] = id_of(body.outputs()[j]);
  }
};

std::map<std::string, int> op_counts(const kiln::ir::Graph &g) {
  std::map<std::string, int> m;
  for (const kiln::ir::Node *n : g.nodes()) ++m[std::string(n->mnemonic())];
  return m;
}

std::vector<std::string> split_commas(const std::string &s) {
  std::vector<std::string> r;
  std::stringstream ss(s);
  for (std::string p; std::getline(ss, p, ',');)
    if (!p.empty()) r.push_back(p);
  return r;
}

bool selected(const std::vector<std::string> &list, const std::string &pass) {
  for (const std::string &p : list)
    if (p == "*" || p == pass) return true;
  return false;
}

// Writes graph dumps to stdout or to files in --out named as KILN_DUMP_DIR names
// them (passes::dump_file_name: "07-after-fuse.kir", NN the pass's position).
class DumpSink {
public:
  explicit DumpSink(const Args &o) : o_(o) {
    if (o.out_dir.empty()) return;
    std::error_code ec;
    fs::create_directories(o.out_dir, ec);
    std::ofstream probe(fs::path(o.out_dir) / ".kiln-write-test");
    if (ec || !probe) throw UsageError("cannot write to --out directory '" + o.out_dir + "'");
    probe.close();
    fs::remove(fs::path(o.out_dir) / ".kiln-write-test", ec);
  }

  void emit(const kiln::ir::Graph &g, size_t index, const std::string &when) {
    std::ostringstream text;
    if (o_.format == "dot") DotWriter(text).write(g, when);
    else kiln::ir::print(g, text);
    if (o_.out_dir.empty()) {
      if (o_.format == "text") std::cout << "// ----- IR " << when << " -----\n";
      std::cout << text.str();
      return;
    }
    fs::path path = fs::path(o_.out_dir) / kiln::passes::dump_file_name(index, when, o_.format == "dot" ? ".dot" : ".kir");
    std::ofstream os(path);
    os << text.str();
    if (!os) throw std::runtime_error("cannot write " + path.string());
    std::cerr << "wrote " << path.string() << "\n";
  }

private:
  const Args &o_;
};

void print_summary(std::ostream &os, const std::map<std::string, int> &before, const kiln::ir::Graph &g,
                   const kiln::codegen::ExecutableStats &plan) {
  auto after = op_counts(g);
  os << "summary:\n  nodes per op (traced -> optimized):\n";
  std::map<std::string, std::pair<int, int>> all;
  for (const auto &[k, v] : before) all[k].first = v;
  for (const auto &[k, v] : after) all[k].second = v;
  for (const auto &[k, v] : all) os << "    " << k << ": " << v.first << " -> " << v.second << "\n";
  // Each group runs as one JIT kernel, a contraction with its epilogue, or eagerly (docs/performance.md).
  os << "  fusion groups: " << (after.count("fusion_group") ? after.at("fusion_group") : 0) << " (" << plan.kernels
     << " JIT kernel, " << plan.epilogue_steps << " contraction+epilogue, " << plan.groups_fallen_back
     << " eager)\n";
  os << "  kernels per call: " << plan.kernels << "\n";
  os << "  bytes moved per call (estimate): " << kiln::bytes_moved_estimate(g) << "\n";
  kiln::passes::GraphStats st = kiln::passes::graph_stats(g);
  os << "  bytes read/written per call (per node, estimate): " << st.bytes_read << " / " << st.bytes_written << "\n";
  if (st.peak_arena_bytes < 0) os << "  peak arena bytes: n/a (no memory plan: plan-memory did not run)\n";
  else os << "  peak arena bytes: " << st.peak_arena_bytes << " (" << st.planned_values << " intermediates)\n";
  os << "  contractions on kiln's GEMM: " << plan.gemm_jit_steps << " (packed weight bytes: " << plan.packed_weight_bytes
     << ")\n";
}

// dump --dynamic: which input dims each symbol stands for, and why the others stayed static.
void print_dynamic_summary(std::ostream &os, const kiln::SymbolicTrace &st) {
  const std::vector<int64_t> &hints = st.graph->symbol_hints();
  os << "dynamic: " << hints.size() << (hints.size() == 1 ? " symbol" : " symbols") << " (traced " << st.traces
     << (st.traces == 1 ? " time)\n" : " times)\n");
  for (size_t k = 0; k < st.symbols.size(); ++k) {
    os << "  s" << k << " = " << hints[k] << " in the traced call:";
    for (const kiln::InputDim &d : st.symbols[k]) os << " input " << d.input << " dim " << d.dim << ";";
    os << "\n";
  }
  for (const std::string &r : st.static_reasons) os << "  static: " << r << "\n";
  if (hints.empty()) return;
  os << (st.holds_at_one ? "  size 1: runs this graph (traced at 1, the same graph)\n"
                         : "  size 1: specializes (traced at 1, the graph differs; KILN_LOG=debug says how)\n");
  // How kiln::compile's program runs each group and contraction for every size.
  for (const std::string &line : kiln::codegen::describe_symbolic_executable(st.graph)) os << "  " << line << "\n";
  os << "  kiln::compile with dynamic shapes runs this graph (issue 17): each step above as it says, the other "
        "ops eagerly\n";
}

int cmd_dump(const Args &o) {
  const kiln::examples::Example ex = example_or_file(o);
  std::vector<std::string> pipeline = split_commas(kiln::passes::default_pipeline());
  for (const auto *list : {&o.after, &o.before})
    for (const std::string &p : *list)
      if (p != "*" && p != "trace" && std::find(pipeline.begin(), pipeline.end(), p) == pipeline.end())
        throw UsageError("unknown pass '" + p + "' (pipeline: " + kiln::passes::default_pipeline() + ")");
  DumpSink sink(o);
  kiln::examples::Workload w = ex.make();
  std::optional<kiln::SymbolicTrace> st;
  if (o.dynamic) st = kiln::trace_symbolic(w.fn, w.inputs, kiln::every_input_dim(w.inputs), "main");
  std::shared_ptr<kiln::ir::Graph> g = st ? st->graph : kiln::trace(w.fn, w.inputs, "main");
  // A symbolic graph goes through the passes that keep symbols only: the
  // others, and codegen, read sizes (issue 17).
  if (!g->symbol_hints().empty())
    std::erase_if(pipeline, [](const std::string &p) { return !kiln::passes::create_pass(p)->handles_symbolic(); });
  auto before = op_counts(*g);
  if (selected(o.after, "trace")) sink.emit(*g, 0, "after trace");
  for (size_t i = 0; i < pipeline.size(); ++i) {
    const std::string &pass = pipeline[i];
    if (selected(o.before, pass)) sink.emit(*g, i + 1, "before " + pass);
    auto timings = kiln::passes::run_pipeline(*g, pass);
    bool changed = !timings.empty() && timings.front().changed;
    // --after-all shows only passes that changed the graph; a named pass is always shown.
    bool named = std::find(o.after.begin(), o.after.end(), pass) != o.after.end();
    if (named || (selected(o.after, pass) && changed)) sink.emit(*g, i + 1, "after " + pass);
  }
  if (o.after.empty() && o.before.empty()) sink.emit(*g, pipeline.size(), "after " + pipeline.back());
  std::ostream &summary = o.format == "dot" && o.out_dir.empty() ? std::cerr : std::cout;
  if (st) print_dynamic_summary(summary, *st);
  if (!g->symbol_hints().empty()) return 0;
  auto exe = kiln::codegen::make_executable(g, w.inputs);
  // Keep dot output on stdout a valid Graphviz file: the summary goes to stderr then.
  print_summary(summary, before, *g, exe->stats());
  return 0;
}

// ---- bench

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// Complete ("X") events of one thread, written in the Chrome trace event format.
struct ChromeTrace {
  struct Event {
    std::string name;
    double ts_us, dur_us;
    std::string cat = "bench";
  };
  std::vector<Event> events;

  static double now_us() {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }
  void add(std::string name, double start_us, double dur_us, std::string cat = "bench") {
    events.push_back({std::move(name), start_us, dur_us, std::move(cat)});
  }
  void write(std::ostream &os) const {
    double t0 = events.empty() ? 0 : events.front().ts_us;
    for (const Event &e : events) t0 = std::min(t0, e.ts_us);
    os << "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [";
    for (size_t i = 0; i < events.size(); ++i)
      os << (i ? ",\n  " : "\n  ") << "{\"name\": \"" << events[i].name << "\", \"cat\": \"" << events[i].cat
         << "\", \"ph\": \"X\", \"ts\": "
         << json_number(events[i].ts_us - t0) << ", \"dur\": " << json_number(events[i].dur_us)
         << ", \"pid\": 1, \"tid\": 1}";
    os << "\n]}\n";
  }
};

// Opens `path` for writing now, so that a bad path fails before minutes of benchmarking.
void open_or_usage_error(std::ofstream &os, const std::string &path, const char *flag) {
  if (path.empty()) return;
  os.open(path);
  if (!os) throw UsageError(std::string("cannot write ") + flag + " file '" + path + "'");
}

// bench --dynamic: one row per example (kiln::bench_dynamic).
int bench_dynamic(const Args &o, const std::vector<kiln::examples::Example> &todo) {
  if (!o.json_file.empty() || !o.trace_file.empty() || !o.gemm.empty())
    throw UsageError("--dynamic takes no --json, --trace or --gemm");
  kiln::DynamicBenchOptions bo;
  if (o.repeat_given) bo.passes = o.repeat;
  std::vector<kiln::DynamicBenchRow> rows;
  for (size_t i = 0; i < todo.size(); ++i) {
    kiln::examples::Workload w = todo[i].make();
    rows.push_back(kiln::bench_dynamic(todo[i].name, w.fn, w.inputs, bo));
    const kiln::DynamicBenchRow &r = rows.back();
    std::fprintf(stderr, "[%zu/%zu] %s: %lld compiles, dynamic %.1f us, static %.1f us per call\n", i + 1, todo.size(),
                 r.name.c_str(), (long long)r.compiles, r.dynamic_us, r.static_us);
  }
  kiln::print_dynamic_bench_table(std::cout, kiln::get_num_threads(), rows);
  return 0;
}

int cmd_bench(const Args &o) {
  // Resolved up front, so that a bad name fails before minutes of benchmarking.
  std::vector<kiln::examples::Example> todo;
  if (o.target == "all") todo = kiln::examples::all_examples();
  else
    for (const std::string &t : o.targets) todo.push_back(example_or_file(o, t));
  if (o.dynamic) return bench_dynamic(o, todo);
  const std::vector<kiln::gemm::Path> paths = o.gemm.empty() ? std::vector{kiln::gemm::path()} : o.gemm;
  std::ofstream json, trace_os;
  open_or_usage_error(json, o.json_file, "--json");
  open_or_usage_error(trace_os, o.trace_file, "--trace");
  ChromeTrace trace;
  int threads = kiln::get_num_threads();
  double t = ChromeTrace::now_us();
  double stream = kiln::stream_triad_gbps(threads);
  trace.add("stream triad", t, ChromeTrace::now_us() - t);
  std::fprintf(stderr, "stream triad (%d threads): %.2f GB/s\n", threads, stream);
  t = ChromeTrace::now_us();
  const double fma = kiln::fma_peak_gflops(threads);
  trace.add("fma peak", t, ChromeTrace::now_us() - t);
  std::fprintf(stderr, "fma peak (%d threads): %.1f GFLOP/s\n", threads, fma);
  kiln::BenchOptions bo;
  bo.iters = o.repeat;
  bo.warmup = std::min(3, o.repeat);
  bo.stream_gbps = stream;
  bo.fma_gflops = fma;
  // Without --repeat, a slow row (gemm-2048: ~100 ms a call) times fewer calls
  // (at least 5) so that `kiln bench all` stays short.
  if (!o.repeat_given) bo.max_phase_ms = 1000;
  std::vector<kiln::BenchRow> rows;
  for (size_t i = 0; i < todo.size(); ++i) {
    const std::string &name = todo[i].name;
    bo.on_phase = [&](const std::string &phase, double start, double dur) { trace.add(name + ": " + phase, start, dur); };
    // One compiled call, step by step: a slice per JIT kernel, BLAS call and eager op.
    if (trace_os.is_open())
      bo.on_step = [&](const kiln::codegen::StepEvent &e) {
        trace.add(std::string(e.name), e.start_us, e.dur_us, std::string(e.category));
      };
    t = ChromeTrace::now_us();
    kiln::examples::Workload w = todo[i].make();
    std::vector<kiln::BenchRow> made;
    if (w.params.empty()) {
      made = kiln::bench_rows(name, w.fn, w.inputs, paths, bo);
    } else {
      // A training step: each measurement trains a copy of its own.
      const kiln::examples::Example &ex = todo[i];
      auto make = [&ex] {
        kiln::examples::Workload c = ex.make();
        return kiln::TrainingSetup{c.fn, c.inputs, c.params};
      };
      made = kiln::bench_training_rows(name, make, paths, bo);
    }
    for (kiln::BenchRow &r : made) {
      std::fprintf(stderr, "[%zu/%zu] %s: eager %.1f us, compiled %.1f us (%.2fx), gemm %s", i + 1, todo.size(),
                   r.name.c_str(), r.eager_us, r.compiled_us, r.speedup, r.gemm.c_str());
      if (std::isfinite(r.gflops)) std::fprintf(stderr, ", %.1f GFLOP/s", r.gflops);
      if (r.eager_peak_bytes > 0)
        std::fprintf(stderr, ", peak memory eager %.2f MiB, compiled %.2f MiB", double(r.eager_peak_bytes) / 1048576,
                     double(r.compiled_peak_bytes) / 1048576);
      std::fprintf(stderr, "\n");
      rows.push_back(std::move(r));
    }
    trace.add(name, t, ChromeTrace::now_us() - t);
  }
  kiln::print_bench_table(std::cout, threads, stream, fma, rows);
  if (trace_os.is_open()) {
    trace.write(trace_os);
    trace_os.close();
    if (!trace_os) throw std::runtime_error("writing " + o.trace_file + " failed");
  }
  if (json.is_open()) {
    kiln::write_bench_json(json, threads, stream, fma, rows);
    json.close();
    if (!json) throw std::runtime_error("writing " + o.json_file + " failed");
  }
  return 0;
}

// The CLI keeps compiled kernels on disk by default, so a second run compiles
// nothing: $XDG_CACHE_HOME/kiln or ~/.cache/kiln. KILN_CACHE_DIR overrides it;
// KILN_CACHE_DIR= (empty) turns the disk cache off.
int run(int argc, char **argv) {
  Args o = parse_args(argc, argv);
  // The global Jit reads KILN_DUMP when it is first used, which is after this (its disk
  // cache default, $XDG_CACHE_HOME/kiln or ~/.cache/kiln, is the library's: codegen/jit.cpp).
  if (!o.jit_dump.empty()) setenv("KILN_DUMP", o.jit_dump.c_str(), 1);
  if (o.threads > 0) kiln::set_num_threads(o.threads);
  if (o.command == "list") return cmd_list();
  if (o.command == "run") return cmd_run(o);
  if (o.command == "dump") return cmd_dump(o);
  return cmd_bench(o);
}

} // namespace

int main(int argc, char **argv) {
  if (argc == 2 && (std::string(argv[1]) == "-h" || std::string(argv[1]) == "--help")) {
    std::cout << kUsage;
    return 0;
  }
  try {
    return run(argc, argv);
  } catch (const UsageError &e) {
    std::cerr << "kiln: " << e.what() << "\n" << kUsage;
    return 2;
  } catch (const std::exception &e) {
    std::cerr << "kiln: error: " << e.what() << "\n";
    return 1;
  } catch (...) {
    std::cerr << "kiln: error: unknown exception\n";
    return 1;
  }
}
