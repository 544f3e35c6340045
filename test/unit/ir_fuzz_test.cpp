// A seeded random-text mutation loop over printed graphs: the parser must
// either return a graph or throw kiln::Error; never crash, hang or throw
// anything else. What parses must print stably and verify without crashing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <iostream>
#include <random>

#include "ir/graph.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"

namespace kiln::ir {
namespace {

const char *kSeeds[] = {
    "graph @w1(%x: f32[16, 32]) params(%a: f32[32], %b: f32[32]) {\n"
    "  %0 = mul(%x, %a) : f32[16, 32]\n"
    "  %1 = add(%0, %b) {alpha = 1} : f32[16, 32]\n"
    "  %2 = gelu(%1) {approximate = \"tanh\"} : f32[16, 32]\n"
    "  return %2\n"
    "}\n",

    "graph @g(%x: f32[4, 8]{1, 4}, %s: i64[4]) params(%w: f32[8, 8]) "
    "consts(%c0: f64[] = wrapped 2.5, %c1: i64[3] = [1, 2, 3], %c2: f32[2] = [0.1, -inf], %c3: i1[1] = [true]) {\n"
    "  %0 = linear(%x, %w, none) : f32[4, 8]\n"
    "  %1, %2 = max(%0) {dim = 1, keepdim = false} : f32[4], i64[4]\n"
    "  %3 = sum(%0) {dims = [0, 1], keepdim = true, dtype = f64} : f64[1, 1]\n"
    "  %4 = clamp(%0) {min = -0.5, max = 1e+300} : f32[4, 8]\n"
    "  writeback %s <- %2\n"
    "  return %1, %2, %3, %4\n"
    "}\n",

    "graph @g(%x: f32[4, 8], %y: f32[8]) {\n"
    "  %0 = fusion_group(%x, %y) : f32[4, 8], f32[4] {\n"
    "    graph @g.group(%a: f32[4, 8], %b: f32[8]) consts(%k: f32[] = 3.0) {\n"
    "      %0 = mul(%a, %b) : f32[4, 8]\n"
    "      %1 = fusion_group(%0, %k) : f32[4, 8] {\n"
    "        graph @\"g group\"(%p: f32[4, 8], %q: f32[]) {\n"
    "          %0 = mul(%p, %q) : f32[4, 8]\n"
    "          return %0\n"
    "        }\n"
    "      }\n"
    "      %2 = amax(%1) {dims = [1], keepdim = false} : f32[4]\n"
    "      return %1, %2\n"
    "    }\n"
    "  }\n"
    "  return %0\n"
    "}\n",
};

// Characters that matter to the lexer, plus some that do not belong at all.
const char kAlphabet[] = "%@()[]{}:,=<-\"\\ \n\t0123456789.eE+-_abfginrstuwx$#;\x01\xff";

std::string mutate(std::string s, std::mt19937 &rng) {
  int edits = rng() % 3 ? 1 : 2 + int(rng() % 3); // mostly single edits, so that some texts still parse
  for (int e = 0; e < edits; ++e) {
    size_t pos = s.empty() ? 0 : rng() % s.size();
    switch (rng() % 6) {
    case 0: // delete a few characters
      if (!s.empty()) s.erase(pos, 1 + rng() % 8);
      break;
    case 1: { // duplicate a chunk
      size_t len = std::min<size_t>(1 + rng() % 40, s.size() - pos);
      s.insert(pos, s.substr(pos, len));
      break;
    }
    case 2: // replace a character
      if (!s.empty()) s[pos] = kAlphabet[rng() % (sizeof kAlphabet - 1)];
      break;
    case 3: // insert a character
      s.insert(s.begin() + long(pos), kAlphabet[rng() % (sizeof kAlphabet - 1)]);
      break;
    case 4: // truncate
      s.resize(pos);
      break;
    default: { // swap two chunks of the text
      size_t other = s.empty() ? 0 : rng() % s.size();
      size_t len = std::min({size_t(1 + rng() % 20), s.size() - pos, s.size() - other});
      if (pos + len <= other || other + len <= pos) std::swap_ranges(s.begin() + long(pos), s.begin() + long(pos + len), s.begin() + long(other));
    }
    }
  }
  return s;
}

// KILN_IR_FUZZ_ITERS and KILN_IR_FUZZ_SEED run a longer or different loop by hand
// (e.g. under ASan); the defaults keep the test deterministic and fast.
long env_or(const char *name, long fallback) {
  const char *v = std::getenv(name);
  return v && *v ? std::strtol(v, nullptr, 10) : fallback;
}

TEST(IrFuzz, MutatedTextParsesOrThrowsKilnError) {
  std::mt19937 rng(uint32_t(env_or("KILN_IR_FUZZ_SEED", 20261129)));
  const long iters = env_or("KILN_IR_FUZZ_ITERS", 8000);
  int parsed = 0, rejected = 0;
  for (long i = 0; i < iters; ++i) {
    std::string text = mutate(kSeeds[i % std::size(kSeeds)], rng);
    std::unique_ptr<Graph> g;
    try {
      g = parse(text, "fuzz.kir");
    } catch (const Error &e) {
      ++rejected;
      ASSERT_EQ(std::string(e.what()).rfind("fuzz.kir:", 0), 0u) << e.what();
      continue;
    } catch (const std::exception &e) {
      FAIL() << "non-kiln exception " << e.what() << " for:\n" << text;
    }
    ++parsed;
    // What parses prints stably ...
    std::string once = print(*g);
    std::unique_ptr<Graph> again;
    try {
      again = parse(once, "reprint.kir");
    } catch (const Error &e) {
      FAIL() << "printed text does not parse: " << e.what() << "\n" << once << "\nfrom:\n" << text;
    }
    ASSERT_EQ(once, print(*again)) << text;
    // ... and verifies or fails with kiln::Error.
    try {
      verify(*g);
    } catch (const Error &) {
    } catch (const std::exception &e) {
      FAIL() << "verify threw a non-kiln exception " << e.what() << " for:\n" << once;
    }
  }
  // The loop must exercise both outcomes to mean anything.
  EXPECT_GT(parsed, iters / 80);
  EXPECT_GT(rejected, iters / 2);
  std::cout << "parsed " << parsed << ", rejected " << rejected << "\n";
}

TEST(IrFuzz, RandomBytesNeverCrash) {
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) {
    std::string text(rng() % 200, '\0');
    for (char &c : text) c = char(rng());
    if (i % 2) text = "graph @g(" + text;
    try {
      parse(text);
    } catch (const Error &) {
    }
  }
}

// A graph using many op kinds; it verifies as written.
const char *kManyOps =
    "graph @many(%x: f32[2, 3, 4], %m: f32[4, 5], %i: i64[2], %img: f32[1, 2, 6, 6]) params(%cw: f32[3, 2, 3, 3], %g: f32[4], %e: f32[10, 4]) consts(%c: f64[] = wrapped 2.0) {\n"
    "  %0 = view(%x) {shape = [6, 4]} : f32[6, 4]\n"
    "  %1 = reshape(%x) {shape = [3, -1]} : f32[3, 8]\n"
    "  %2 = transpose(%x) {dim0 = 0, dim1 = 2} : f32[4, 3, 2]\n"
    "  %3 = permute(%x) {dims = [2, 0, 1]} : f32[4, 2, 3]\n"
    "  %4 = slice(%x) {dim = 2, start = 1, end = none, step = 2} : f32[2, 3, 2]\n"
    "  %5 = select(%x) {dim = 1, index = -1} : f32[2, 4]\n"
    "  %6 = unsqueeze(%x) {dim = 0} : f32[1, 2, 3, 4]\n"
    "  %7 = squeeze(%6) {dims = [0]} : f32[2, 3, 4]\n"
    "  %8 = expand(%g) {shape = [3, 4]} : f32[3, 4]\n"
    "  %9 = matmul(%0, %m) : f32[6, 5]\n"
    "  %10 = sum(%x) {dims = [1], keepdim = false, dtype = none} : f32[2, 4]\n"
    "  %11 = softmax(%x) {dim = -1} : f32[2, 3, 4]\n"
    "  %12 = cat(%0, %0) {dim = 1} : f32[6, 8]\n"
    "  %13, %14 = split(%0) {split_sizes = [2, 4], dim = 0} : f32[2, 4], f32[4, 4]\n"
    "  %15 = conv2d(%img, %cw, none) {stride = [1, 1], padding = [1, 1], dilation = [1, 1], groups = 1} : f32[1, 3, 6, 6]\n"
    "  %16 = max_pool2d(%img) {kernel_size = [2, 2], stride = [2, 2], padding = [0, 0], dilation = [1, 1], ceil_mode = false} : f32[1, 2, 3, 3]\n"
    "  %17 = layer_norm(%x, %g, none) {normalized_shape = [4], eps = 1e-05} : f32[2, 3, 4]\n"
    "  %18 = embedding(%e, %i) : f32[2, 4]\n"
    "  %19 = index_select(%x, %i) {dim = 0} : f32[2, 3, 4]\n"
    "  %20 = mul(%x, %c) : f32[2, 3, 4]\n"
    "  %21 = argmax(%x) {dim = none, keepdim = false} : i64[]\n"
    "  %22 = var(%x) {dims = [0, 1], correction = none, keepdim = true} : f32[1, 1, 4]\n"
    "  %23 = to(%x) {dtype = f64} : f64[2, 3, 4]\n"
    "  %b = gt(%x, %c) : i1[2, 3, 4]\n"
    "  %24 = where(%b, %x, %c) : f32[2, 3, 4]\n"
    "  %25 = clamp(%x) {min = 0, max = none} : f32[2, 3, 4]\n"
    "  %26 = tril(%0) {diagonal = 0} : f32[6, 4]\n"
    "  %27 = as_strided(%x) {size = [2, 2], stride = [1, 2], storage_offset = none} : f32[2, 2]\n"
    "  %28 = adaptive_avg_pool2d(%img) {output_size = [2, 2]} : f32[1, 2, 2, 2]\n"
    "  %29 = stack(%g, %g) {dim = 0} : f32[2, 4]\n"
    "  return %0, %1, %2, %3, %4, %5, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29\n"
    "}\n"
;

// Replaces integer literals (shapes, dims, attribute values) by edge values:
// the texts mostly still parse, so every op's shape rule meets odd input in
// the verifier (META tensors only: nothing is allocated or computed).
TEST(IrFuzz, NumberMutationsVerifyOrThrow) {
  ASSERT_NO_THROW(verify(*parse(kManyOps)));
  const int64_t kEdge[] = {0, 1, -1, 2, -2, 3, 5, 16, 17, -17, int64_t(1) << 31, int64_t(1) << 40, -(int64_t(1) << 40),
                           INT64_MAX, INT64_MIN};
  std::string base = kManyOps;
  std::vector<std::pair<size_t, size_t>> numbers; // (pos, len) of each integer literal
  for (size_t i = 0; i < base.size();) {
    bool start = std::isdigit(static_cast<unsigned char>(base[i])) &&
                 (i == 0 || !std::isalnum(static_cast<unsigned char>(base[i - 1])));
    size_t j = i;
    while (j < base.size() && std::isdigit(static_cast<unsigned char>(base[j]))) ++j;
    if (start && base[i - 1] != '%') numbers.push_back({i, j - i});
    i = std::max(j, i + 1);
  }
  ASSERT_GT(numbers.size(), 100u);
  std::mt19937 rng(uint32_t(env_or("KILN_IR_FUZZ_SEED", 11)));
  const long iters = env_or("KILN_IR_FUZZ_ITERS", 3000);
  int verified = 0, parsed = 0;
  for (long it = 0; it < iters; ++it) {
    std::string text = base;
    // Edit from the back so earlier positions stay valid.
    std::vector<size_t> picks;
    for (int k = 0; k < 1 + int(rng() % 3); ++k) picks.push_back(rng() % numbers.size());
    std::sort(picks.rbegin(), picks.rend());
    picks.erase(std::unique(picks.begin(), picks.end()), picks.end());
    for (size_t p : picks) {
      int64_t v = kEdge[rng() % std::size(kEdge)];
      text.replace(numbers[p].first, numbers[p].second, std::to_string(v));
    }
    std::unique_ptr<Graph> g;
    try {
      g = parse(text);
    } catch (const Error &) {
      continue;
    }
    ++parsed;
    try {
      verify(*g);
      ++verified;
    } catch (const Error &) {
    } catch (const std::exception &e) {
      FAIL() << "verify threw a non-kiln exception " << e.what() << " for:\n" << text;
    }
  }
  EXPECT_GT(parsed, iters / 4);
  EXPECT_GT(verified, 0);
  std::cout << "parsed " << parsed << ", verified " << verified << "\n";
}

} // namespace
} // namespace kiln::ir
