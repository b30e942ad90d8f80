"""Fixtures of the lowbit serve tests (serve_helpers.py): the built CLI and the default
model (skipped, saying why, when absent) and a server shared by a test module."""
import pytest

from serve_helpers import Server, cli_path, model_path


@pytest.fixture(scope="session")
def cli():
    path = cli_path()
    if not path.is_file():
        pytest.skip(f"no lowbit CLI at {path} (build it: scripts/build.sh, or set LOWBIT_CLI)")
    return path


@pytest.fixture(scope="session")
def model():
    path = model_path()
    if not path.is_file():
        pytest.skip(f"no model at {path} (run scripts/fetch-model.sh or set LOWBIT_MODEL)")
    return path


@pytest.fixture(scope="module")
def server(cli, model):
    s = Server(cli, model, "--parallel", "4", "--n-predict", "8", "--ctx-size", "256", "--max-body-bytes", "65536")
    yield s
    assert s.stop() == 0
