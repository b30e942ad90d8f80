"""What the lowbit serve tests share: where the built CLI and the default model are, and
a `lowbit serve` process on a free loopback port (stopped with SIGTERM, which must exit 0)."""
import json
import os
import pathlib
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def cli_path():
    """$LOWBIT_CLI, else the CLI of the build tree scripts/build.sh makes (BUILD_DIR, default build)."""
    if os.environ.get("LOWBIT_CLI"):
        return pathlib.Path(os.environ["LOWBIT_CLI"])
    return ROOT / os.environ.get("BUILD_DIR", "build") / "bin" / "lowbit"


def model_path():
    if os.environ.get("LOWBIT_MODEL"):
        return pathlib.Path(os.environ["LOWBIT_MODEL"])
    cache = os.environ.get("LOWBIT_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "lowbit")
    return pathlib.Path(cache) / "models" / MODEL_FILE


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read())


class Server:
    """A `lowbit serve` process on a free port of 127.0.0.1."""

    def __init__(self, cli, model, *options):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.NamedTemporaryFile(prefix="lowbit-serve-", suffix=".log", delete=False)
        command = [str(cli), "serve", "--model", str(model), "--port", str(self.port), "--device", "cpu", *options]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.monotonic() + 120
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"lowbit serve exited with {self.process.returncode}: {' '.join(command)}\n"
                                   + pathlib.Path(self.log.name).read_text(errors="replace")[-2000:])
            try:
                if get_json(self.url + "/health", timeout=2)["status"] == "ok":
                    break
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            if time.monotonic() > deadline:
                self.process.kill()
                raise RuntimeError("lowbit serve did not answer /health in 120 s")
            time.sleep(0.2)

    def health(self):
        return get_json(self.url + "/health")

    def wait_idle(self, timeout=60):
        """Waits until nothing runs and every cache is freed; returns /health."""
        deadline = time.monotonic() + timeout
        while True:
            h = self.health()
            if h["running"] == 0 and h["queued"] == 0 and h["sequences"] == 0 and h["kv_used_bytes"] == 0:
                return h
            if time.monotonic() > deadline:
                raise AssertionError(f"the server did not return to idle: {h}")
            time.sleep(0.1)

    def stop(self):
        """SIGTERM, then the exit status (0 for a graceful shutdown)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
                raise AssertionError("lowbit serve did not stop within 60 s of SIGTERM")
        self.log.close()
        if self.process.returncode == 0:
            os.unlink(self.log.name)
        return self.process.returncode
