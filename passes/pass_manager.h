// Passes are named units run(Graph&) -> changed; a pipeline is a string of names
// ("decompose,canonicalize,cse,dce"). The pass manager times each pass, verifies
// after each when asked, and dumps the IR before/after chosen passes (only when
// a pass changed something) to a stream or as numbered files in a directory.
#pragma once

#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"

namespace kiln::passes {

class Pass {
public:
  virtual ~Pass() = default;
  virtual std::string_view name() const = 0;
  // Returns whether the graph changed.
  virtual bool run(ir::Graph &g) = 0;
  // Whether the pass keeps symbolic dims (issue 17): every size it reads to
  // decide or compute is either read as an expression or left alone when
  // symbolic. run_pipeline refuses a graph with symbols for the others.
  virtual bool handles_symbolic() const { return false; }
};

using PassFactory = std::function<std::unique_ptr<Pass>()>;
void register_pass(std::string name, PassFactory factory);
// nullptr for an unknown name.
std::unique_ptr<Pass> create_pass(std::string_view name);
std::vector<std::string> pass_names();

// The default pipeline of the compiler.
std::string default_pipeline();
// `pipeline` without the passes that do not keep symbolic dims (issue 17):
// what a symbolic graph runs.
std::string symbolic_pipeline(std::string_view pipeline);

struct PipelineOptions {
  bool verify_each = false;
  // Passes after which to dump ("*" = all); dumps happen only when a pass changed the graph.
  std::vector<std::string> dump_after;
  std::vector<std::string> dump_before;
  // When set, dumps go to files "00-after-trace.kir", "01-after-decompose.kir", ...
  // here (passes/dump_names.h); otherwise to `dump_stream` (stderr when null).
  std::string dump_dir;
  std::ostream *dump_stream = nullptr;
  // Reads KILN_DUMP=after-all|after:<pass>[,<pass>] and KILN_DUMP_DIR into this.
  static PipelineOptions from_env();
};

struct PassTiming {
  std::string pass;
  double ms;
  bool changed;
};

// Runs `pipeline` (comma-separated pass names) on g. Unknown pass -> kiln::Error
// listing the known ones. Returns per-pass timings (also logged at debug level).
std::vector<PassTiming> run_pipeline(ir::Graph &g, std::string_view pipeline, const PipelineOptions &opts = {});

} // namespace kiln::passes
