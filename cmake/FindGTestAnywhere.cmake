# GoogleTest as an installed library (Debian's libgtest-dev: a CMake package) or only
# as sources (the googletest source package under /usr/src/googletest, as on the GPU
# machine). Nothing is downloaded.
find_package(GTest CONFIG QUIET)
if(NOT TARGET GTest::gtest_main)
  find_package(GTest MODULE QUIET)
endif()
if(NOT TARGET GTest::gtest_main)
  set(LOWBIT_GTEST_SOURCE_DIR "/usr/src/googletest" CACHE PATH "GoogleTest sources, used when no installed GTest is found")
  if(EXISTS "${LOWBIT_GTEST_SOURCE_DIR}/CMakeLists.txt")
    message(STATUS "lowbit: building GoogleTest from ${LOWBIT_GTEST_SOURCE_DIR}")
    set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
    set(BUILD_GMOCK OFF CACHE BOOL "" FORCE)
    add_subdirectory("${LOWBIT_GTEST_SOURCE_DIR}" "${CMAKE_BINARY_DIR}/_googletest" EXCLUDE_FROM_ALL)
    add_library(GTest::gtest_main ALIAS gtest_main)
  else()
    message(FATAL_ERROR "lowbit: GoogleTest not found. Install libgtest-dev (scripts/setup.sh does), "
                        "set LOWBIT_GTEST_SOURCE_DIR, or configure with -DLOWBIT_BUILD_TESTS=OFF.")
  endif()
endif()
include(GoogleTest)
