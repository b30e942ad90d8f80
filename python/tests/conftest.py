import importlib.util

import numpy as np
import pytest


def has_module(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def cuda_available() -> bool:
    if not has_module("torch"):
        return False
    import torch

    return torch.cuda.is_available()


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def awkward_matrix(rng, rows, cols, dtype=np.float32):
    """Values of mixed magnitudes, with exact ties, zeros and a constant row."""
    x = rng.standard_normal((rows, cols)).astype(np.float32) * np.float32(10.0) ** rng.integers(-3, 3, (rows, 1))
    x[0, : min(cols, 3)] = 0.0
    if rows > 2:
        x[2, :] = 1.5  # a constant row: scale 0 for asymmetric per-token domains
    return x.astype(dtype)


def lowbit_cli() -> str:
    """The built `lowbit` CLI from $LOWBIT_CLI (scripts/python-test.sh sets it to
    build/bin/lowbit when that exists); the calling test skips, saying why, without it."""
    import os

    path = os.environ.get("LOWBIT_CLI", "")
    if not path:
        pytest.skip("LOWBIT_CLI is not set (the path of the built lowbit CLI, e.g. build/bin/lowbit; "
                    "scripts/python-test.sh sets it when build/bin/lowbit exists)")
    if not os.access(path, os.X_OK):
        pytest.skip(f"LOWBIT_CLI={path} is not an executable file (build the CLI: scripts/build.sh)")
    return path
