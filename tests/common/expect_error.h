// EXPECT_LOWBIT_ERROR(statement, "substring"): the statement throws lowbit::Error
// and its message contains the substring (the argument it names).
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "lowbit/error.h"

#define EXPECT_LOWBIT_ERROR(statement, substring)                                            \
  do {                                                                                       \
    bool lowbit_threw_ = false;                                                              \
    try {                                                                                    \
      statement;                                                                             \
    } catch (const ::lowbit::Error& e) {                                                     \
      lowbit_threw_ = true;                                                                  \
      EXPECT_NE(std::string(e.what()).find(substring), std::string::npos)                   \
          << "message: " << e.what() << "\nexpected to contain: " << (substring);            \
    }                                                                                        \
    EXPECT_TRUE(lowbit_threw_) << #statement " did not throw lowbit::Error";                 \
  } while (0)
