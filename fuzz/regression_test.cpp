// Replays every committed fuzzer input (test/fuzz-regressions/<target>/*,
// crashes found by the libFuzzer targets and a few seeds) through the target's
// entry function. Runs in the normal suite with any compiler; under the
// sanitizer build it also catches memory errors and leaks on these inputs.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "fuzz/targets.h"

namespace fs = std::filesystem;

namespace {

using Target = std::string (*)(const uint8_t *, size_t);

void replay(const char *name, Target target) {
  fs::path dir = fs::path(KILN_FUZZ_REGRESSIONS_DIR) / name;
  ASSERT_TRUE(fs::is_directory(dir)) << dir;
  int count = 0;
  for (const auto &entry : fs::directory_iterator(dir)) {
    if (!entry.is_regular_file() || entry.path().filename() == "README.md") continue;
    std::ifstream in(entry.path(), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::string err = target(reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size());
    EXPECT_EQ(err, "") << entry.path();
    ++count;
  }
  EXPECT_GT(count, 0) << "no inputs under " << dir;
}

TEST(FuzzRegressions, IrParser) { replay("ir_parser", kiln::fuzz::ir_parser); }
TEST(FuzzRegressions, RandomGraph) { replay("random_graph", kiln::fuzz::random_graph); }
TEST(FuzzRegressions, SafetensorsReader) { replay("safetensors_reader", kiln::fuzz::safetensors_reader); }
TEST(FuzzRegressions, CacheEntry) { replay("cache_entry", kiln::fuzz::cache_entry); }

} // namespace
