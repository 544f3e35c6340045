// The pass manager: a registry of named passes and the pipeline driver
// (timing, verification and "IR after X" dumps, in the manner of Halide's
// lowering log and MLIR's --print-ir-after-all).
#include "passes/pass_manager.h"

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <spdlog/spdlog.h>

#include "ir/printer.h"
#include "ir/verifier.h"
#include "passes/dump_names.h"
#include "runtime/log.h"

namespace kiln::passes {

namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, PassFactory, std::less<>> factories;
};

Registry &registry() {
  static Registry r;
  return r;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::vector<std::string> split_list(std::string_view s) {
  std::vector<std::string> out;
  while (!s.empty()) {
    size_t c = s.find(',');
    std::string_view item = trim(s.substr(0, c));
    if (!item.empty()) out.emplace_back(item);
    if (c == std::string_view::npos) break;
    s.remove_prefix(c + 1);
  }
  return out;
}

std::string join(const std::vector<std::string> &names) {
  std::string s;
  for (const std::string &n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

bool selected(const std::vector<std::string> &which, std::string_view pass) {
  for (const std::string &w : which)
    if (w == "*" || w == pass) return true;
  return false;
}

// Writes dumps to a stream or to numbered files; a dump directory that cannot
// be written is reported once and the pipeline goes on without dumps.
class Dumper {
public:
  explicit Dumper(const PipelineOptions &o) : opts_(o) {
    if (opts_.dump_dir.empty() || !enabled()) return;
    std::error_code ec;
    std::filesystem::create_directories(opts_.dump_dir, ec);
    if (ec) disable("cannot create " + opts_.dump_dir + ": " + ec.message());
  }

  bool enabled() const { return !disabled_ && (!opts_.dump_after.empty() || !opts_.dump_before.empty()); }

  // `index` numbers the file: 0 for the initial graph, i for the i-th pass.
  void dump(size_t index, const std::string &stage, const std::string &text) {
    if (disabled_) return;
    if (opts_.dump_dir.empty()) {
      std::ostream &os = opts_.dump_stream ? *opts_.dump_stream : std::cerr;
      os << "// ----- IR " << stage << " -----\n" << text << std::flush;
      return;
    }
    std::filesystem::path path = std::filesystem::path(opts_.dump_dir) / dump_file_name(index, stage);
    std::ofstream out(path);
    out << text;
    out.flush();
    if (!out) disable("cannot write " + path.string());
  }

private:
  void disable(const std::string &why) {
    log()->warn("IR dumps disabled: {}", why);
    disabled_ = true;
  }

  const PipelineOptions &opts_;
  bool disabled_ = false;
};

// A file or folder name from `s`: anything but [A-Za-z0-9._-] becomes '_'.
std::string file_safe(std::string s) {
  for (char &c : s)
    if (!std::isalnum((unsigned char)c) && c != '.' && c != '-' && c != '_') c = '_';
  if (s.empty() || s == "." || s == "..") s.insert(0, "_");
  return s;
}

std::string join_dims(IntArrayRef d) {
  std::string s;
  for (size_t i = 0; i < d.size(); ++i) s.append(i ? "x" : "").append(std::to_string(d[i]));
  return d.empty() ? std::string("scalar") : s;
}

void verify_after(const ir::Graph &g, std::string_view pass) {
  try {
    ir::verify(g);
  } catch (const Error &e) {
    throw Error(detail::concat("verifier failed after pass '", pass, "': ", e.what()));
  }
}

// A pass meeting a malformed graph may throw a standard exception (an
// attribute index out of range, ...): report it as a kiln::Error naming the pass.
bool run_pass(Pass &pass, ir::Graph &g) {
  try {
    return pass.run(g);
  } catch (const Error &) {
    throw;
  } catch (const std::exception &e) {
    throw Error(detail::concat("pass '", pass.name(), "' failed on @", g.name(), ": ", e.what()));
  }
}

} // namespace

std::string dump_file_name(size_t index, std::string_view stage, std::string_view extension) {
  char num[24];
  std::snprintf(num, sizeof num, "%02zu-", index);
  std::string file(stage);
  for (char &c : file)
    if (c == ' ') c = '-';
  return std::string(num).append(file_safe(file)).append(extension);
}

std::string dump_subdir(const ir::Graph &g) {
  std::string sig;
  for (const ir::Value *v : g.inputs()) {
    const ir::TensorType &t = v->type();
    sig.append(sig.empty() ? "" : "_").append(short_name(t.dtype)).append("-").append(join_dims(t.shape));
    if (t.strides) sig.append("-s").append(join_dims(*t.strides));
  }
  if (sig.empty()) sig = "no-inputs";
  if (sig.size() > 100) {
    char h[24];
    std::snprintf(h, sizeof h, "-%016llx", (unsigned long long)std::hash<std::string>{}(sig));
    sig = sig.substr(0, 60) + h;
  }
  return file_safe(g.name()) + "/" + file_safe(sig);
}

void use_graph_dump_dir(PipelineOptions &o, const ir::Graph &g) {
  if (o.dump_dir.empty() || (o.dump_after.empty() && o.dump_before.empty())) return;
  std::filesystem::path dir = std::filesystem::path(o.dump_dir) / dump_subdir(g);
  o.dump_dir = dir.string();
  // Numbered dumps already there come from an earlier run (whose passes may
  // have changed more) and would read as this run's.
  std::error_code ec;
  for (const auto &e : std::filesystem::directory_iterator(dir, ec)) {
    std::string f = e.path().filename().string();
    bool numbered = f.size() > 7 && std::isdigit((unsigned char)f[0]) && std::isdigit((unsigned char)f[1]) &&
                    f[2] == '-' && f.compare(f.size() - 4, 4, ".kir") == 0;
    std::error_code ignored;
    if (numbered && e.is_regular_file(ignored)) std::filesystem::remove(e.path(), ignored);
  }
}

void register_pass(std::string name, PassFactory factory) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.factories[std::move(name)] = std::move(factory);
}

std::unique_ptr<Pass> create_pass(std::string_view name) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.factories.find(name);
  return it == r.factories.end() ? nullptr : it->second();
}

std::vector<std::string> pass_names() {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> names;
  for (const auto &[name, factory] : r.factories) names.push_back(name);
  return names;
}

std::string default_pipeline() { return "upcast,decompose,canonicalize,cse,dce,layout,fuse,fuse-horizontal,materialize-views,schedule,plan-memory"; }

PipelineOptions PipelineOptions::from_env() {
  PipelineOptions o;
  if (const char *dir = std::getenv("KILN_DUMP_DIR")) o.dump_dir = dir;
  const char *dump = std::getenv("KILN_DUMP");
  // KILN_DUMP=after:a,b continues its list over commas; other KILN_DUMP words
  // (kernels, llvm, asm) belong to codegen and are skipped here.
  std::vector<std::string> *list = nullptr;
  for (const std::string &tok : split_list(dump ? dump : "")) {
    if (tok == "after-all") {
      o.dump_after.push_back("*");
      list = nullptr;
    } else if (tok == "before-all") {
      o.dump_before.push_back("*");
      list = nullptr;
    } else if (tok.rfind("after:", 0) == 0) {
      list = &o.dump_after;
      list->push_back(tok.substr(6));
    } else if (tok.rfind("before:", 0) == 0) {
      list = &o.dump_before;
      list->push_back(tok.substr(7));
    } else if (list && tok.find(':') == std::string::npos && create_pass(tok)) {
      list->push_back(tok);
    } else {
      list = nullptr;
    }
  }
  // A dump directory alone asks for every stage.
  if (!o.dump_dir.empty() && !dump) o.dump_after.push_back("*");
  return o;
}

namespace {
std::vector<std::string> symbolic_pass_names() {
  std::vector<std::string> names;
  for (const std::string &n : pass_names())
    if (create_pass(n)->handles_symbolic()) names.push_back(n);
  return names;
}
} // namespace

std::string symbolic_pipeline(std::string_view pipeline) {
  std::vector<std::string> kept;
  for (const std::string &name : split_list(pipeline))
    if (auto pass = create_pass(name); pass && pass->handles_symbolic()) kept.push_back(name);
  return join(kept);
}

std::vector<PassTiming> run_pipeline(ir::Graph &g, std::string_view pipeline, const PipelineOptions &opts) {
  std::vector<std::unique_ptr<Pass>> passes;
  for (const std::string &name : split_list(pipeline)) {
    auto pass = create_pass(name);
    KILN_CHECK(pass, "unknown pass '", name, "' in pipeline \"", pipeline, "\"; known passes: ", join(pass_names()));
    // Checked before any pass runs, so that a refused pipeline leaves the graph as it was.
    KILN_CHECK(g.symbol_hints().empty() || pass->handles_symbolic(), "pass '", name,
               "' does not handle symbolic dims yet (@", g.name(), " has ", g.symbol_hints().size(),
               g.symbol_hints().size() == 1 ? " symbol" : " symbols", "); the passes that do: ",
               join(symbolic_pass_names()));
    passes.push_back(std::move(pass));
  }
  Dumper dumper(opts);
  if (dumper.enabled()) dumper.dump(0, "after trace", ir::print(g));
  std::vector<PassTiming> timings;
  for (size_t i = 0; i < passes.size(); ++i) {
    Pass &pass = *passes[i];
    std::string name(pass.name());
    bool want_before = dumper.enabled() && selected(opts.dump_before, name);
    std::string before = want_before ? ir::print(g) : std::string();
    auto t0 = std::chrono::steady_clock::now();
    bool changed = run_pass(pass, g);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    timings.push_back({name, ms, changed});
    log()->debug("pass {}: {:.3f} ms{}", name, ms, changed ? "" : " (unchanged)");
    // A memory plan describes the graph it was made for: any other change drops it.
    if (changed && name.rfind("plan-memory", 0) != 0) g.set_memory_plan(std::nullopt);
    if (opts.verify_each) verify_after(g, name);
    if (!changed) continue;
    if (want_before) dumper.dump(i + 1, "before " + name, before);
    if (dumper.enabled() && selected(opts.dump_after, name)) dumper.dump(i + 1, "after " + name, ir::print(g));
  }
  return timings;
}

} // namespace kiln::passes
