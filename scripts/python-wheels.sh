#!/usr/bin/env bash
# Downloads the Python package's build and test dependencies (pure-Python wheels:
# nanobind, scikit-build-core, pytest and their dependencies) into .wheels/, so that
# scripts/python-test.sh can install them on a machine without network
# (pip --no-index --find-links .wheels). NumPy is not included: it is a binary wheel
# for one Python version, and machines with PyTorch already have it. tomli and
# exceptiongroup are what the others need on Python < 3.11. gguf (pure Python; the GGUF
# tests read lowbit's files with it, and transformers loads GGUF models through it) and
# pyyaml, the one of its dependencies that importing it needs (a wheel for this Python).
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-python3}"
mkdir -p .wheels
"$python" -m pip download -q --only-binary=:all: --dest .wheels \
  "nanobind>=2.0" "scikit-build-core>=0.10" pytest
# Pure-Python builds of those (pip would pick this Python's compiled tomli).
"$python" -m pip download -q --only-binary=:all: --dest .wheels \
  --platform any --implementation py --python-version 3.10 --abi none \
  tomli exceptiongroup typing-extensions
"$python" -m pip download -q --only-binary=:all: --no-deps --dest .wheels gguf pyyaml
# openai (the lowbit serve tests' client) and its dependencies, some of them compiled
# for this Python: they serve a machine with the same Python version.
"$python" -m pip download -q --only-binary=:all: --dest .wheels openai
ls .wheels
