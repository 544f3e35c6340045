// Where IR dumps go and what they are called: one scheme for KILN_DUMP_DIR,
// kiln-opt --dump-dir and `kiln dump --out` (docs/frontend.md).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "ir/graph.h"
#include "passes/pass_manager.h"

namespace kiln::passes {

// The file a dump of `stage` ("after trace", "after fuse", "before fuse") is
// written to: "NN-after-fuse.kir", NN the pass's position in the pipeline
// (00: the traced graph).
std::string dump_file_name(size_t index, std::string_view stage, std::string_view extension = ".kir");

// "<graph name>/<input signature>", e.g. "main/f32-5x16": dtype and sizes per
// input, "_"-separated; strides when the type has them; a hash instead of a
// very long signature.
std::string dump_subdir(const ir::Graph &g);

// When `o` dumps to a directory: points it at dir/dump_subdir(g), a folder of
// g's own (one per compiled function and specialization), and removes the
// numbered dumps an earlier run left there. The compiler calls it for KILN_DUMP_DIR.
void use_graph_dump_dir(PipelineOptions &o, const ir::Graph &g);

} // namespace kiln::passes
