// kiln-opt: reads a graph in the IR's text form, verifies it, runs passes and
// prints the result. Without --passes it is a round trip (parse, verify, print).
//
//   kiln-opt [--passes=a,b,c] [--print-ir-after-all] [--print-ir-after=<pass>]
//            [--print-ir-before=<pass>] [--verify-each] [--dump-dir=DIR] FILE|-
//
// Errors go to stderr ("file:line:col: message" for the parser) with exit code
// 1; bad usage (an unknown option or pass, no input) prints the usage and exits
// with 2. The printed graph is always verified: an ill-typed result is an error.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "passes/pass_manager.h"

namespace {

constexpr const char *kUsage =
    "usage: kiln-opt [options] FILE|-\n"
    "  --passes=a,b,c           run these passes (comma-separated) after verifying\n"
    "  --print-ir-after-all     dump the IR after every pass that changed it (stderr)\n"
    "  --print-ir-after=PASS    dump the IR after PASS (repeatable)\n"
    "  --print-ir-before=PASS   dump the IR before PASS (repeatable)\n"
    "  --verify-each            verify after every pass\n"
    "  --dump-dir=DIR           write dumps as numbered .kir files into DIR (alone: after every pass)\n"
    "  --no-verify              do not verify the input (the output is always verified)\n"
    "  -h, --help               this text\n"
    "Reads FILE (or stdin for -), prints the resulting graph to stdout.\n"
    "Exit status: 0 success, 1 bad input or an ill-typed result, 2 bad usage.\n";

struct Options {
  std::string input;
  bool has_passes = false;
  std::string passes;
  bool verify = true;
  kiln::passes::PipelineOptions pipeline;
};

bool starts_with(const std::string &s, std::string_view prefix) { return s.rfind(prefix, 0) == 0; }

[[noreturn]] void usage_error(const std::string &msg) {
  std::cerr << "kiln-opt: " << msg << "\n" << kUsage;
  std::exit(2);
}

// The value of "--name=value", or a usage error when it is empty.
std::string flag_value(const std::string &arg, std::string_view name) {
  std::string v = arg.substr(name.size());
  if (v.empty()) usage_error("missing value in '" + arg + "'");
  return v;
}

std::string known_passes() {
  std::string s;
  for (const std::string &p : kiln::passes::pass_names()) s += (s.empty() ? "" : ", ") + p;
  return s;
}

// An unknown pass name is bad usage (exit 2), reported before reading the input.
void check_pass_names(const std::string &passes) {
  std::stringstream ss(passes);
  for (std::string name; std::getline(ss, name, ',');) {
    while (!name.empty() && (name.front() == ' ' || name.front() == '\t')) name.erase(0, 1);
    while (!name.empty() && (name.back() == ' ' || name.back() == '\t')) name.pop_back();
    if (!name.empty() && !kiln::passes::create_pass(name))
      usage_error("unknown pass '" + name + "' (known passes: " + known_passes() + ")");
  }
}

Options parse_args(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::cout << kUsage;
      std::exit(0);
    } else if (starts_with(a, "--passes=")) {
      o.has_passes = true;
      o.passes = a.substr(9);
    } else if (a == "--print-ir-after-all") {
      o.pipeline.dump_after.push_back("*");
    } else if (starts_with(a, "--print-ir-after=")) {
      o.pipeline.dump_after.push_back(flag_value(a, "--print-ir-after="));
    } else if (starts_with(a, "--print-ir-before=")) {
      o.pipeline.dump_before.push_back(flag_value(a, "--print-ir-before="));
    } else if (a == "--verify-each") {
      o.pipeline.verify_each = true;
    } else if (starts_with(a, "--dump-dir=")) {
      o.pipeline.dump_dir = flag_value(a, "--dump-dir=");
    } else if (a == "--no-verify") {
      o.verify = false;
    } else if (a != "-" && starts_with(a, "-")) {
      usage_error("unknown option '" + a + "'");
    } else if (!o.input.empty()) {
      usage_error("more than one input file");
    } else {
      o.input = a;
    }
  }
  if (o.input.empty()) usage_error("no input file (use - for stdin)");
  check_pass_names(o.passes);
  // A dump directory alone asks for every stage (as KILN_DUMP_DIR does).
  if (!o.pipeline.dump_dir.empty() && o.pipeline.dump_after.empty() && o.pipeline.dump_before.empty())
    o.pipeline.dump_after.push_back("*");
  return o;
}

// Empty on success, else why `path` cannot be read (at most
// kiln::ir::kMaxTextBytes: a larger file is refused before it is read).
std::string read_input(const std::string &path, std::string &out) {
  if (path == "-") return kiln::ir::read_text(std::cin, out);
  return kiln::ir::read_text_file(path, out);
}

// Verifies a freshly parsed graph; an error at a node points at its line.
void verify_parsed(const kiln::ir::Graph &g, const std::string &file, const kiln::ir::SourceMap &locations) {
  try {
    kiln::ir::verify(g);
  } catch (const kiln::ir::VerifyError &e) {
    auto it = e.node() ? locations.find(e.node()) : locations.end();
    if (it == locations.end()) throw;
    throw kiln::Error(file + ":" + std::to_string(it->second.line) + ":" + std::to_string(it->second.col) + ": " +
                      e.what());
  }
}

int run(const Options &o) {
  const std::string file = o.input == "-" ? "<stdin>" : o.input;
  std::string text;
  if (std::string why = read_input(o.input, text); !why.empty()) {
    std::cerr << "kiln-opt: " << file << ": " << why << "\n";
    return 1;
  }
  try {
    kiln::ir::SourceMap locations;
    auto g = kiln::ir::parse(text, file, &locations);
    if (o.verify) verify_parsed(*g, file, locations);
    if (o.has_passes) {
      kiln::passes::PipelineOptions opts = o.pipeline;
      opts.dump_stream = &std::cerr;
      kiln::passes::run_pipeline(*g, o.passes, opts);
    }
    // Whatever the flags, never print an ill-typed graph as a success. Without
    // passes the output is the input, whose nodes still have their lines.
    if (o.has_passes) kiln::ir::verify(*g);
    else verify_parsed(*g, file, locations);
    kiln::ir::print(*g, std::cout);
    std::cout.flush();
  } catch (const kiln::Error &e) {
    std::string msg = e.what();
    // Parser messages carry "file:line:col: "; others (verifier, passes) get the file.
    if (!starts_with(msg, file + ":")) msg = file + ": " + msg;
    std::cerr << msg << "\n";
    return 1;
  }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  Options o = parse_args(argc, argv);
  try {
    return run(o);
  } catch (const std::exception &e) {
    std::cerr << "kiln-opt: internal error: " << e.what() << "\n";
    return 1;
  }
}
