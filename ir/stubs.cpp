// TEMPORARY weak placeholders so that every layer links while the passes land.
#include "passes/pass_manager.h"

namespace kiln::passes {
__attribute__((weak)) std::vector<PassTiming> run_pipeline(ir::Graph &, std::string_view, const PipelineOptions &) {
  KILN_FAIL("passes::run_pipeline: not implemented yet");
}
__attribute__((weak)) std::string default_pipeline() { return "decompose,canonicalize,cse,dce"; }
} // namespace kiln::passes
