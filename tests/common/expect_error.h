// EXPECT_LOWBIT_ERROR(statement, "substring"): the statement throws lowbit::Error and
// its what() contains the substring (tests pass the argument name plus the start of
// the complaint, e.g. "scales: expected 32 elements").
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "lowbit/error.h"

namespace lowbit::test {

inline ::testing::AssertionResult throws_lowbit_error(const std::function<void()>& statement,
                                                      const std::string& substring) {
  try {
    statement();
  } catch (const Error& e) {
    const std::string message = e.what();
    if (message.find(substring) != std::string::npos) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "threw lowbit::Error \"" << message << "\"\n  which does not contain \""
                                         << substring << "\"";
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw another exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw (expected lowbit::Error containing \"" << substring << "\")";
}

}  // namespace lowbit::test

#define EXPECT_LOWBIT_ERROR(statement, substring) \
  EXPECT_TRUE(::lowbit::test::throws_lowbit_error([&] { statement; }, substring)) << "statement: " #statement
