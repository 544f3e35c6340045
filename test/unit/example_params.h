// Parameterizing a test over every example model (tests named *_examples_test
// link the examples library): INSTANTIATE_TEST_SUITE_P(Examples, Suite,
// ::testing::ValuesIn(kiln::testing::example_names()), kiln::testing::example_param_name).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "example.h"

namespace kiln::testing {

// Training examples (train-*) change their parameters on every call, so tests
// that compare two calls of one workload take the others; training steps have
// their own tests (training_examples_test).
inline bool is_training_example(const std::string &name) { return name.rfind("train-", 0) == 0; }

inline std::vector<std::string> example_names() {
  std::vector<std::string> names;
  for (const examples::Example &e : examples::all_examples())
    if (!is_training_example(e.name)) names.push_back(e.name);
  return names;
}

inline std::vector<std::string> training_example_names() {
  std::vector<std::string> names;
  for (const examples::Example &e : examples::all_examples())
    if (is_training_example(e.name)) names.push_back(e.name);
  return names;
}

// "w5-gpt2-block" -> "w5_gpt2_block" (gtest names take no '-').
inline std::string example_param_name(const ::testing::TestParamInfo<std::string> &info) {
  std::string s = info.param;
  for (char &c : s)
    if (c == '-') c = '_';
  return s;
}

} // namespace kiln::testing
