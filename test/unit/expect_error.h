// expect_error(fn, {"part", ...}): fn must throw kiln::Error whose message
// contains every part. Any other exception, or none, is a test failure.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "runtime/error.h"

namespace kiln::testing {

inline void expect_error(const std::function<void()> &fn, const std::vector<std::string> &want) {
  try {
    fn();
  } catch (const Error &e) {
    std::string msg = e.what();
    for (const std::string &w : want) EXPECT_NE(msg.find(w), std::string::npos) << "'" << w << "' not in: " << msg;
    return;
  } catch (const std::exception &e) {
    ADD_FAILURE() << "threw a non-kiln exception: " << e.what();
    return;
  }
  ADD_FAILURE() << "did not throw; expected an error mentioning '" << want.front() << "'";
}

} // namespace kiln::testing
