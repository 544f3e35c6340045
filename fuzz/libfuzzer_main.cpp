// libFuzzer entry point of one target; KILN_FUZZ_TARGET names the function in
// fuzz/targets.h. A property violation aborts so libFuzzer saves the input.
#include <cstdio>
#include <cstdlib>

#include "fuzz/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string err = kiln::fuzz::KILN_FUZZ_TARGET(data, size);
  if (err.empty()) return 0;
  std::fprintf(stderr, "kiln fuzz target failed: %s\n", err.c_str());
  std::abort();
}
