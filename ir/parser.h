// Reads the text form that ir/printer.h writes. Errors are kiln::Error with
// "file:line:col: message"; never a crash or a hang on malformed text.
//
// A .kir file is untrusted input. Its limits, each checked before anything of
// the claimed size is allocated: at most kMaxTextBytes of text (tools check a
// file's size before reading it: read_text_file), fusion groups nested at most
// 32 deep, rank at most kMaxDims, each dim at most 2^40 and a type's elements
// at most 2^50, numbers at most 512 characters; a constant's tensor is
// allocated only when the text left can hold its elements, so memory stays
// within a few times the text's size.
#pragma once

#include <cstddef>
#include <iosfwd>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "ir/graph.h"

namespace kiln::ir {

constexpr size_t kMaxTextBytes = size_t(1) << 28; // 256 MiB

// Reads all of `in` into `out`, at most kMaxTextBytes: "" or why not (over
// the limit: stops reading one chunk past it).
std::string read_text(std::istream &in, std::string &out);
// The same for a file, whose size is checked before anything is read: "" or
// why not ("is a directory", "cannot read the file", "N bytes, over the limit").
std::string read_text_file(const std::string &path, std::string &out);

std::unique_ptr<Graph> parse(std::string_view text, std::string_view filename = "<input>");

// Where each parsed node (nested ones too) starts, so that tools can point a
// verifier error (VerifyError::node()) at its line.
struct SourceLoc {
  int line = 0;
  int col = 0;
};
using SourceMap = std::unordered_map<const Node *, SourceLoc>;
std::unique_ptr<Graph> parse(std::string_view text, std::string_view filename, SourceMap *locations);

} // namespace kiln::ir
