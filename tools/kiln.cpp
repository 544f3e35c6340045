// kiln: the command line of the compiler.
//
//   kiln list
//   kiln run <example> [--eager|--compiled] [--threads N]
//   kiln dump <example> [--after-all|--after=PASS|--before=PASS] [--format=text|dot] [--out DIR]
//             [--kernels|--llvm|--asm]
//   kiln bench <example>|all [--threads N] [--repeat N] [--json FILE] [--trace FILE]
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
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "codegen/executable.h"
#include "example.h"
#include "frontend/bench.h"
#include "ir/printer.h"
#include "passes/dump_names.h"
#include "passes/plan_memory.h"

namespace {

namespace fs = std::filesystem;
using kiln::Tensor;

constexpr const char *kUsage =
    "usage: kiln <command> [options]\n"
    "  list                                      the examples, one line each\n"
    "  run <example> [--eager|--compiled] [--threads N]\n"
    "                                            output shapes, checksum, max |compiled - eager|;\n"
    "                                            both paths run, --eager/--compiled picks the one shown\n"
    "  dump <example> [--after-all|--after=PASS|--before=PASS] [--format=text|dot] [--out DIR]\n"
    "                 [--kernels|--llvm|--asm]   IR between passes (default: the final IR), a summary;\n"
    "                                            --kernels/--llvm/--asm: JIT dumps (KILN_DUMP) on stderr\n"
    "  bench <example>|all [--threads N] [--repeat N] [--json FILE] [--trace FILE]\n"
    "                                            eager vs compiled table; --repeat: timed calls (20);\n"
    "                                            --trace: Chrome trace (Perfetto, chrome://tracing) of the\n"
    "                                            phases and of one compiled call, a slice per kernel/BLAS call\n"
    "compiled kernels are cached in $KILN_CACHE_DIR (default ~/.cache/kiln; KILN_CACHE_DIR= turns it off)\n";

// Bad usage: reported with the usage text and exit code 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Args {
  std::string command;
  std::string target; // example name (or "all" for bench)
  std::string mode = "both";
  int threads = 0; // 0: leave the runtime default
  int repeat = 20;
  std::vector<std::string> after, before;
  std::string format = "text";
  std::string out_dir, json_file, trace_file, jit_dump;
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
      {"run", {"--eager", "--compiled", "--threads"}},
      {"dump", {"--after-all", "--after", "--before", "--format", "--out", "--kernels", "--llvm", "--asm"}},
      {"bench", {"--threads", "--repeat", "--json", "--trace"}},
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
  else if (f == "--kernels" || f == "--llvm" || f == "--asm") o.jit_dump = f.substr(2);
  else if (take_value(a, i, "--threads", v)) o.threads = parse_positive("--threads", v);
  else if (take_value(a, i, "--repeat", v)) o.repeat = parse_positive("--repeat", v);
  else if (take_value(a, i, "--after", v)) o.after.push_back(v);
  else if (take_value(a, i, "--before", v)) o.before.push_back(v);
  else if (take_value(a, i, "--format", v)) o.format = v;
  else if (take_value(a, i, "--out", v)) o.out_dir = v;
  else if (take_value(a, i, "--json", v)) o.json_file = v;
  else if (take_value(a, i, "--trace", v)) o.trace_file = v;
  else throw UsageError("option '" + f + "' needs a value");
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
    else if (o.target.empty()) o.target = a[i];
    else throw UsageError("unexpected argument '" + a[i] + "'");
  }
  if (o.command != "list" && o.target.empty()) throw UsageError("'" + o.command + "' needs an example name");
  if (o.command == "list" && !o.target.empty()) throw UsageError("unexpected argument '" + o.target + "'");
  if (o.format != "text" && o.format != "dot") throw UsageError("--format must be text or dot, got '" + o.format + "'");
  return o;
}

const kiln::examples::Example &example_or_throw(const std::string &name) {
  const kiln::examples::Example *ex = kiln::examples::find_example(name);
  if (!ex) throw UsageError("unknown example '" + name + "' (see 'kiln list')");
  return *ex;
}

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
  const auto &ex = example_or_throw(o.target);
  kiln::examples::Workload w = ex.make();
  std::vector<Tensor> eager = w.fn(w.inputs);
  kiln::CompiledFunction f = kiln::compile(w.fn);
  std::vector<Tensor> compiled = f(w.inputs);
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
              (long long)f.kernels_per_call(w.inputs));
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
// them (passes::dump_file_name: "06-after-fuse.kir", NN the pass's position).
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
                   const kiln::codegen::PlanStats &plan) {
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
}

int cmd_dump(const Args &o) {
  const auto &ex = example_or_throw(o.target);
  std::vector<std::string> pipeline = split_commas(kiln::passes::default_pipeline());
  for (const auto *list : {&o.after, &o.before})
    for (const std::string &p : *list)
      if (p != "*" && p != "trace" && std::find(pipeline.begin(), pipeline.end(), p) == pipeline.end())
        throw UsageError("unknown pass '" + p + "' (pipeline: " + kiln::passes::default_pipeline() + ")");
  DumpSink sink(o);
  kiln::examples::Workload w = ex.make();
  std::shared_ptr<kiln::ir::Graph> g = kiln::trace(w.fn, w.inputs, "main");
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
  auto exe = kiln::codegen::make_executable(g, w.inputs);
  // Keep dot output on stdout a valid Graphviz file: the summary goes to stderr then.
  print_summary(o.format == "dot" && o.out_dir.empty() ? std::cerr : std::cout, before, *g, exe->stats());
  return 0;
}

// ---- bench

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

void write_json(std::ostream &os, int threads, double stream, const std::vector<kiln::BenchRow> &rows) {
  os << "{\"threads\": " << threads << ", \"stream_gbps\": " << json_number(stream) << ", \"rows\": [";
  for (size_t i = 0; i < rows.size(); ++i) {
    const kiln::BenchRow &r = rows[i];
    os << (i ? ",\n  " : "\n  ") << "{\"name\": \"" << r.name << "\", \"eager_us\": " << json_number(r.eager_us)
       << ", \"compiled_us\": " << json_number(r.compiled_us) << ", \"speedup\": " << json_number(r.speedup)
       << ", \"compile_ms_cold\": " << json_number(r.compile_ms_cold)
       << ", \"compile_ms_warm\": " << json_number(r.compile_ms_warm) << ", \"kernels\": " << r.kernels
       << ", \"bytes_moved\": " << r.bytes_moved << ", \"achieved_gbps\": " << json_number(r.achieved_gbps)
       << ", \"bandwidth_fraction\": " << json_number(r.bandwidth_fraction)
       << ", \"max_abs_diff\": " << json_number(r.max_abs_diff)
       << ", \"max_rel_diff\": " << json_number(r.max_rel_diff) << "}";
  }
  os << "\n]}\n";
}

void print_table(int threads, double stream, const std::vector<kiln::BenchRow> &rows) {
  std::printf("threads: %d, stream triad: %.2f GB/s\n", threads, stream);
  std::printf("%-18s %12s %12s %8s %10s %10s %7s %8s %7s %10s\n", "example", "eager us", "compiled us", "speedup",
              "cold ms", "warm ms", "kernels", "GB/s", "triad", "max diff");
  for (const kiln::BenchRow &r : rows)
    std::printf("%-18s %12.2f %12.2f %7.2fx %10.1f %10.1f %7lld %8.2f %6.1f%% %10.3g\n", r.name.c_str(), r.eager_us,
                r.compiled_us, r.speedup, r.compile_ms_cold, r.compile_ms_warm, (long long)r.kernels,
                r.achieved_gbps, 100 * r.bandwidth_fraction, r.max_abs_diff);
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

int cmd_bench(const Args &o) {
  std::vector<const kiln::examples::Example *> todo;
  if (o.target == "all")
    for (const auto &e : kiln::examples::all_examples()) todo.push_back(&e);
  else todo.push_back(&example_or_throw(o.target));
  std::ofstream json, trace_os;
  open_or_usage_error(json, o.json_file, "--json");
  open_or_usage_error(trace_os, o.trace_file, "--trace");
  ChromeTrace trace;
  int threads = kiln::get_num_threads();
  double t = ChromeTrace::now_us();
  double stream = kiln::stream_triad_gbps(threads);
  trace.add("stream triad", t, ChromeTrace::now_us() - t);
  std::fprintf(stderr, "stream triad (%d threads): %.2f GB/s\n", threads, stream);
  kiln::BenchOptions bo;
  bo.iters = o.repeat;
  bo.warmup = std::min(3, o.repeat);
  bo.stream_gbps = stream;
  std::vector<kiln::BenchRow> rows;
  for (size_t i = 0; i < todo.size(); ++i) {
    const std::string &name = todo[i]->name;
    bo.on_phase = [&](const std::string &phase, double start, double dur) { trace.add(name + ": " + phase, start, dur); };
    // One compiled call, step by step: a slice per JIT kernel, BLAS call and eager op.
    if (trace_os.is_open())
      bo.on_step = [&](const kiln::codegen::StepEvent &e) {
        trace.add(std::string(e.name), e.start_us, e.dur_us, std::string(e.category));
      };
    t = ChromeTrace::now_us();
    kiln::examples::Workload w = todo[i]->make();
    rows.push_back(kiln::bench_row(name, w.fn, w.inputs, bo));
    trace.add(name, t, ChromeTrace::now_us() - t);
    const kiln::BenchRow &r = rows.back();
    std::fprintf(stderr, "[%zu/%zu] %s: eager %.1f us, compiled %.1f us (%.2fx)\n", i + 1, todo.size(),
                 r.name.c_str(), r.eager_us, r.compiled_us, r.speedup);
  }
  print_table(threads, stream, rows);
  if (trace_os.is_open()) {
    trace.write(trace_os);
    trace_os.close();
    if (!trace_os) throw std::runtime_error("writing " + o.trace_file + " failed");
  }
  if (json.is_open()) {
    write_json(json, threads, stream, rows);
    json.close();
    if (!json) throw std::runtime_error("writing " + o.json_file + " failed");
  }
  return 0;
}

// The CLI keeps compiled kernels on disk by default, so a second run compiles
// nothing: $XDG_CACHE_HOME/kiln or ~/.cache/kiln. KILN_CACHE_DIR overrides it;
// KILN_CACHE_DIR= (empty) turns the disk cache off.
void set_default_cache_dir() {
  if (std::getenv("KILN_CACHE_DIR")) return;
  std::string dir;
  if (const char *xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) dir = std::string(xdg) + "/kiln";
  else if (const char *home = std::getenv("HOME"); home && *home) dir = std::string(home) + "/.cache/kiln";
  if (!dir.empty()) setenv("KILN_CACHE_DIR", dir.c_str(), 1);
}

int run(int argc, char **argv) {
  Args o = parse_args(argc, argv);
  // The global Jit reads KILN_DUMP and KILN_CACHE_DIR when it is first used, which is after this.
  if (!o.jit_dump.empty()) setenv("KILN_DUMP", o.jit_dump.c_str(), 1);
  set_default_cache_dir();
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
