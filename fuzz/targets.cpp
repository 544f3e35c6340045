#include "fuzz/targets.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <map>
#include <memory>
#include <string_view>

#include <sys/mman.h>
#include <unistd.h>

#include <kiln/kiln.h>

#include "codegen/cache_trust.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "util/random_graph.h"

namespace kiln::fuzz {

namespace {

std::string check_round_trip(const ir::Graph &g) {
  std::string once = ir::print(g);
  std::unique_ptr<ir::Graph> again;
  try {
    again = ir::parse(once, "<printed>");
  } catch (const Error &e) {
    return std::string("the printed graph does not parse: ") + e.what() + "\n" + once;
  }
  std::string twice = ir::print(*again);
  if (twice != once) return "printing is not stable:\n" + once + "\nthen:\n" + twice;
  return "";
}

std::string parse_and_verify(std::string_view text) {
  std::unique_ptr<ir::Graph> g;
  try {
    g = ir::parse(text, "<fuzz>");
  } catch (const Error &) {
    return ""; // rejected with a diagnostic: fine
  }
  if (std::string err = check_round_trip(*g); !err.empty()) return err;
  try {
    ir::verify(*g);
  } catch (const Error &) {
  }
  return "";
}

// The same graph on permuted, sliced and expanded inputs: compiled equals
// eager, values and output strides, and refuses what eager refuses (view() of
// a strided input).
std::string compile_matches_eager_on_strided_inputs(const testing::RandomGraph &rg, size_t seed,
                                                    const CompileOptions &copts, double atol) {
  std::vector<Tensor> inputs = rg.make_inputs(seed, true);
  std::vector<Tensor> want, got;
  std::string eager_error, compiled_error;
  try {
    want = rg.fn(inputs);
  } catch (const Error &e) {
    eager_error = e.what();
  }
  try {
    got = compile(rg.fn, copts)(inputs);
  } catch (const Error &e) {
    compiled_error = e.what();
  }
  if (eager_error.empty() != compiled_error.empty())
    return "on strided inputs, eager " + (eager_error.empty() ? std::string("ran") : "threw " + eager_error) +
           " but compiled " + (compiled_error.empty() ? std::string("ran") : "threw " + compiled_error) + "\n" +
           testing::describe(rg, *rg.trace());
  if (!eager_error.empty()) return "";
  std::string diff = testing::compare_outputs(got, want, 1e-4, atol);
  for (size_t i = 0; diff.empty() && i < got.size() && i < want.size(); ++i)
    for (int64_t d = 0; d < want[i].dim(); ++d)
      if (want[i].size(d) > 1 && got[i].stride(d) != want[i].stride(d))
        diff = "output " + std::to_string(i) + " strides " + shape_str(got[i].strides()) + " != eager's " +
               shape_str(want[i].strides());
  if (diff.empty()) return "";
  return "compiled vs eager on strided inputs: " + diff + "\n" + testing::describe(rg, *rg.trace());
}

// Float32 sums of K products in two orders differ by up to about K * 8 ulp of
// the magnitudes (the random-graph test's bound): atol grows with the longest
// contraction of the graph, 0 for graphs without one.
double contraction_atol(const ir::Graph &g) {
  return 1e-5 + double(testing::max_contraction_length(g)) * 8 * std::ldexp(1.0, -23);
}

std::string compile_matches_interpreter(const uint8_t *data, size_t size, const testing::RandomGraphOptions &opts) {
  testing::RandomGraph rg = testing::random_graph_from_bytes(data, size, opts);
  std::unique_ptr<ir::Graph> g = rg.trace();
  const double atol = contraction_atol(*g);
  std::vector<Tensor> inputs = rg.make_inputs(size);
  std::vector<Tensor> want = ir::interpret(*g, inputs);
  CompileOptions copts;
  copts.fallback = Fallback::Off;
  std::vector<Tensor> got = compile(rg.fn, copts)(inputs);
  std::string diff = testing::compare_outputs(got, want, 1e-4, atol);
  if (!diff.empty()) return "compiled vs interpreter: " + diff + "\n" + testing::describe(rg, *g);
  return compile_matches_eager_on_strided_inputs(rg, size, copts, atol);
}

std::string compile_matches_interpreter(const uint8_t *data, size_t size) {
  // Small graphs keep each run fast (one JIT compile per input).
  testing::RandomGraphOptions opts;
  opts.max_ops = 8;
  opts.max_numel = 512;
  if (std::string err = compile_matches_interpreter(data, size, opts); !err.empty()) return err;
  // One input in four also drives a contraction-heavy graph (matmul, linear,
  // bmm, addmm, conv2d at odd sizes: kiln's GEMM and conv kernels, packed
  // weights), chosen by the last byte so that the graphs the other inputs
  // (and the committed regression inputs) make stay what they were.
  // Another one in four (last byte 1 mod 4) drives a graph that also draws the newer
  // elementwise ops (extended_graph_options: libm list, composed activations, composites).
  if (size > 0 && data[size - 1] % 4 == 1)
    return compile_matches_interpreter(data, size, testing::extended_graph_options());
  // And one in four (last byte 2 mod 4) a graph with scans, sorts, trunc and frac (scan_graph_options).
  if (size > 0 && data[size - 1] % 4 == 2)
    return compile_matches_interpreter(data, size, testing::scan_graph_options());
  if (size == 0 || data[size - 1] % 4 != 0) return "";
  testing::RandomGraphOptions copts = testing::contraction_graph_options();
  copts.max_ops = 6;
  return compile_matches_interpreter(data, size, copts);
}

// The bytes in an anonymous in-memory file; -1 if it cannot be made.
class MemFile {
public:
  MemFile(const uint8_t *data, size_t size) : fd_(memfd_create("kiln-fuzz", MFD_CLOEXEC)) {
    if (fd_ < 0) return;
    if ((size && ::write(fd_, data, size) != ssize_t(size)) || ::lseek(fd_, 0, SEEK_SET) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~MemFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  MemFile(const MemFile &) = delete;
  MemFile &operator=(const MemFile &) = delete;
  int fd() const { return fd_; }
  std::string path() const { return "/proc/self/fd/" + std::to_string(fd_); }

private:
  int fd_;
};

std::string load_and_check(const MemFile &file, size_t size) {
  std::map<std::string, Tensor> tensors;
  try {
    tensors = load_safetensors(file.path());
  } catch (const Error &) {
    return ""; // rejected with a diagnostic: fine
  }
  uint64_t bytes = 0;
  for (const auto &[name, t] : tensors) bytes += uint64_t(t.nbytes());
  if (bytes > size) return "loaded " + std::to_string(bytes) + " bytes of tensors from a " + std::to_string(size) + "-byte file";
  load_safetensors_metadata(file.path()); // the same checks: must not throw now
  return "";
}

// An entry file: read_entry_fd reads exactly the file, or refuses it.
std::string read_entry_check(const uint8_t *data, size_t size) {
  MemFile file(data, size);
  if (file.fd() < 0) return "";
  std::string out;
  std::string why = codegen::cache::read_entry_fd(file.fd(), out);
  if (!why.empty()) return size > codegen::cache::kMaxEntryBytes ? "" : "a private file within the limit refused: " + why;
  if (out.size() != size || out != std::string_view(reinterpret_cast<const char *>(data), size))
    return "read_entry_fd returned other bytes than the file's";
  return "";
}

std::string open_entry_check(std::string_view bytes) {
  namespace cache = codegen::cache;
  const cache::Secret secret{};
  const std::string_view key = "kiln-fuzz-key";
  std::string_view object;
  if (cache::open_entry(bytes, key, secret, &object).empty() && cache::seal_entry(key, object, secret) != bytes)
    return "an entry opened that seal_entry would not make";
  // Any key and object seal and open again, and only with their secret and key.
  size_t key_len = bytes.empty() ? 0 : std::min<size_t>(uint8_t(bytes[0]), bytes.size() - 1);
  std::string_view k = bytes.substr(bytes.empty() ? 0 : 1, key_len), obj = bytes.substr(bytes.empty() ? 0 : 1 + key_len);
  std::string sealed = cache::seal_entry(k, obj, secret);
  std::string why = cache::open_entry(sealed, k, secret, &object);
  if (!why.empty()) return "a sealed entry does not open: " + why;
  if (object != obj) return "a sealed entry opens to another object";
  cache::Secret other = secret;
  other[31] ^= 1;
  if (cache::open_entry(sealed, k, other, &object).empty()) return "a sealed entry opens with another secret";
  if (cache::open_entry(sealed, std::string(k) + "x", secret, &object).empty())
    return "a sealed entry opens for another key";
  return "";
}

} // namespace

std::string ir_parser(const uint8_t *data, size_t size) {
  try {
    return parse_and_verify(std::string_view(reinterpret_cast<const char *>(data), size));
  } catch (const std::exception &e) {
    return std::string("an exception other than a parse error escaped: ") + e.what();
  }
}

std::string random_graph(const uint8_t *data, size_t size) {
  try {
    return compile_matches_interpreter(data, size);
  } catch (const std::exception &e) {
    // Every generated graph is valid: nothing may throw, not even kiln::Error.
    return std::string("threw: ") + e.what();
  }
}

std::string safetensors_reader(const uint8_t *data, size_t size) {
  try {
    MemFile file(data, size);
    if (file.fd() < 0) return "";
    return load_and_check(file, size);
  } catch (const std::exception &e) {
    return std::string("an exception other than kiln::Error escaped: ") + e.what();
  }
}

std::string cache_entry(const uint8_t *data, size_t size) {
  try {
    if (std::string err = read_entry_check(data, size); !err.empty()) return err;
    return open_entry_check(std::string_view(reinterpret_cast<const char *>(data), size));
  } catch (const std::exception &e) {
    return std::string("an exception escaped: ") + e.what();
  }
}

} // namespace kiln::fuzz
