#!/usr/bin/env bash
# Builds and installs the Python package (`lowbit`, with the CUDA kernels when nvcc is
# found) and runs its pytest suite (GPU tests skip without a GPU, torch / transformers
# tests without those packages), then the tests of `lowbit serve` with the `openai`
# client (tests/serve: the CLI built in ${BUILD_DIR:-build}, skipped without it or the
# default model). Offline machines: run scripts/python-wheels.sh where
# there is network first; the wheels in .wheels/ then travel with the repository.
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-python3}"
[ -x /usr/local/cuda/bin/nvcc ] && export PATH="/usr/local/cuda/bin:$PATH"
if [ -z "${LOWBIT_CUDA:-}" ]; then
  LOWBIT_CUDA=ON
  command -v nvcc >/dev/null || { LOWBIT_CUDA=OFF; echo "python-test: nvcc not found, building the CPU parts only"; }
fi
export LOWBIT_CUDA
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"

pip_source=()
[ -d .wheels ] && pip_source=(--no-index --find-links .wheels)

# The build and test dependencies, where missing (import name:package name). gguf is
# llama.cpp's Python GGUF reader and NumPy dequantizers, which check lowbit's GGUF files;
# it needs only numpy and pyyaml to import (its other dependencies serve downloads).
missing=()
for pair in numpy:numpy pytest:pytest nanobind:nanobind scikit_build_core:scikit-build-core yaml:pyyaml; do
  "$python" -c "import ${pair%%:*}" 2>/dev/null || missing+=("${pair#*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "python-test: installing ${missing[*]}"
  "$python" -m pip install -q "${pip_source[@]}" "${missing[@]}"
fi
# openai, the client of the lowbit serve tests; they skip where it cannot be had.
if ! "$python" -c "import openai" 2>/dev/null; then
  echo "python-test: installing openai"
  "$python" -m pip install -q "${pip_source[@]}" openai ||
    echo "python-test: could not install openai; the lowbit serve tests will skip"
fi
if ! "$python" -c "import gguf" 2>/dev/null; then
  echo "python-test: installing gguf"
  "$python" -m pip install -q "${pip_source[@]}" --no-deps gguf
fi

# No build isolation: the build dependencies installed above are used as they are, so
# nothing is downloaded, and the build tree in build-python/ is reused between runs.
echo "python-test: building and installing lowbit (LOWBIT_CUDA=$LOWBIT_CUDA)"
"$python" -m pip install -q --no-build-isolation --no-deps "${pip_source[@]}" .
# The install's `lowbit` command, in the environment's scripts directory.
"$("$python" -c 'import sysconfig; print(sysconfig.get_path("scripts"))')/lowbit" --version

# The CLI the GGUF and lowbit serve tests drive, where it is built (scripts/build.sh).
cli="$PWD/${BUILD_DIR:-build}/bin/lowbit"
[ -z "${LOWBIT_CLI:-}" ] && [ -x "$cli" ] && export LOWBIT_CLI="$cli"
# Two runs: each folder's tests import helpers from their own conftest module, and one
# pytest process can hold only one module of that name. Arguments go to one run.
if [ $# -gt 0 ]; then
  "$python" -m pytest -q -rs "$@"
else
  "$python" -m pytest python/tests -q -rs
  "$python" -m pytest tests/serve -q -rs
fi
