"""A real ``python -m sglang.launch_server`` process tree on CPU, started and stopped by the tests.

:func:`launch` starts the server as a user does (a subprocess in its own process group, its
output in a log file), with the test doubles installed in every process sglang starts through the
test-only plugin (:mod:`testkit.doubles.server_plugin`) and the ``sgl_kernel`` import stub on its
``PYTHONPATH``. :meth:`Server.stop` ends the tree by its own PIDs (the group, then every process
seen in the tree) and checks that no process and no listening port is left.

What a CPU server needs (sglang 0.5.23, measured): ``SGLANG_USE_CPU_ENGINE=1``, an explicit
``--attention-backend`` (else x86 picks ``intel_amx``), ``--max-total-tokens`` (else the KV pool
is sized from host RAM), Triton's interpreter (sglang's KV-index kernels are Triton); with several
ranks ``SGLANG_NCCL_SO_PATH`` naming no library (the groups then use gloo) and one OpenMP binding
per rank.

On a CUDA GPU (:data:`CUDA`) the same launch runs sglang's own CUDA-graph runner: decode graphs
captured at start-up and replayed while serving (prefill graphs off). What such a server needs
besides the doubles (sglang 0.5.23 on an H200 without the ``sglang-kernel`` wheel, measured):
sglang's fused ops on torch (``SGLANG_FORCE_FUSED_OP_BACKEND=torch``), torch sampling, and
``sglang-kernel`` version metadata for the import stub
(:func:`testkit.doubles.server_plugin.site_dir`).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

from testkit.doubles import aiter_kernels, server_plugin

__all__ = ["CPU", "CUDA", "Output", "Platform", "Server", "ServerFailed", "launch", "running"]

ROOT = Path(__file__).resolve().parents[1]
SGL_KERNEL_STUB_DIR = ROOT / "gpu" / "wheelhouse"
READY_TIMEOUT_S = 300.0
REQUEST_TIMEOUT_S = 300.0
STOP_GRACE_S = 20.0
FLUSH_WAIT_S = 60.0
CHILD_FAILED = "SIGQUIT received"
"""What sglang's launcher logs when one of its processes failed."""


@dataclasses.dataclass(frozen=True)
class Platform:
    """Where a server runs: what it adds to the server's environment and command line."""

    device: str
    env: tuple[tuple[str, str], ...]
    flags: tuple[str, ...]

    def graph_flags(self, graph_max_bs: int | None) -> tuple[str, ...]:
        """Decode CUDA graphs up to ``graph_max_bs`` requests (``None``: graphs off)."""
        if self.device == "cpu" or graph_max_bs is None:
            return ("--disable-cuda-graph",)
        import argparse

        from sglang.srt.server_args import ServerArgs

        parser = argparse.ArgumentParser()
        ServerArgs.add_cli_args(parser)
        known = set(parser._option_string_actions)
        flags: tuple[str, ...] = ()
        if "--cuda-graph-max-bs-decode" in known:  # 0.5.23: the bare flag is ambiguous
            flags += ("--cuda-graph-max-bs-decode", str(graph_max_bs))
        else:
            flags += ("--cuda-graph-max-bs", str(graph_max_bs))
        if "--cuda-graph-backend-prefill" in known:  # decode graphs only
            flags += ("--cuda-graph-backend-prefill", "disabled")
        elif "--disable-piecewise-cuda-graph" in known:  # 0.5.12
            flags += ("--disable-piecewise-cuda-graph",)
        return flags


CPU = Platform("cpu", (
    ("SGLANG_USE_CPU_ENGINE", "1"),
    ("TRITON_INTERPRET", "1"),
    # sglang's CPU path torch.compiles a few helpers under DP attention: tens of seconds of
    # C++ builds per server for no difference in what is computed
    ("TORCHDYNAMO_DISABLE", "1"),
), ("--device", "cpu"))
CUDA = Platform("cuda", (
    # sglang's fused RMSNorm, SiLU-and-mul and rotary on torch (the sgl_kernel stub has none)
    ("SGLANG_FORCE_FUSED_OP_BACKEND", "torch"),
    ("TORCHDYNAMO_DISABLE", "1"),
    # the radix tree in Python: 0.5.23's bundled Rust tree core is built against the torch it
    # pins (2.14); under another torch (the GPU image's 2.11) it misreads tensor dtypes
    # ("insert value must be an int64 tensor, got Int", then "got ComplexDouble")
    ("SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND", "python"),
), ("--sampling-backend", "pytorch", "--mem-fraction-static", "0.3"))
"""One GPU per rank; several servers may share one GPU (each takes what it needs, well below
the static fraction, which only bounds it)."""


class ServerFailed(RuntimeError):
    """The server exited (or never became ready); the message ends with its log's tail."""


@dataclasses.dataclass(frozen=True)
class Output:
    """One completion: greedy token ids and their log-probabilities."""

    tokens: list[int]
    logprobs: list[float]
    cached_tokens: int


PORT_RANGE = range(10000, 21700)
"""Where the server's ``--port`` is drawn: below sglang's own NCCL ports (22000-29999), and with
every port in :data:`DERIVED` below the kernel's ephemeral ports (32768 up, where any client
socket may sit)."""
DERIVED = (0, 13, *range(233, 241), 10000)
"""Offsets from ``--port`` that sglang binds: DP attention's handshake (+13), its processes' TCP
ports (+233 up) and 0.5.11's gRPC port (+10000)."""


def _free_port(derived: tuple[int, ...] = DERIVED) -> int:
    """A ``--port`` in :data:`PORT_RANGE` with every port sglang derives from it (the offsets in
    ``derived``) free."""
    rng = random.Random()
    while True:
        port = rng.randrange(PORT_RANGE.start, PORT_RANGE.stop)
        if all(_port_free(port + d) for d in derived):
            return port


def _port_free(port: int) -> bool:
    """Nothing listens on ``port`` (connections closing in TIME_WAIT do not count)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@dataclasses.dataclass
class Server:
    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path
    record_dir: Path
    seen: dict[int, tuple[float, str]] = dataclasses.field(default_factory=dict)
    """Every process seen in the tree: pid -> (start time, command line as sglang titles it)."""
    ports: set[int] = dataclasses.field(default_factory=set)
    peak_rss: int = 0
    """The largest resident memory of the whole tree seen (bytes), sampled twice a second."""
    ready_timeout_s: float = READY_TIMEOUT_S

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def fail(self, what: str) -> ServerFailed:
        tail = "\n".join(self.log().splitlines()[-40:])
        return ServerFailed(f"{what} (exit status {self.proc.poll()}); log tail:\n{tail}")

    def observe(self) -> dict[int, tuple[float, str]]:
        """Record the tree's processes (pid -> title) and listening ports now; return the tree."""
        tree: dict[int, tuple[float, str]] = {}
        rss = 0
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(self.proc.pid)
            for p in [root, *root.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    title = " ".join(p.cmdline())[:200].strip()
                    if not title and p.pid in self.seen:  # exiting: keep its last title
                        title = self.seen[p.pid][1]
                    tree[p.pid] = (p.create_time(), title)
                    rss += p.memory_info().rss
                    self.ports |= {c.laddr.port for c in p.net_connections("inet")
                                   if c.status == psutil.CONN_LISTEN}
        self.seen.update(tree)
        self.peak_rss = max(self.peak_rss, rss)
        return tree

    def _sample(self) -> None:
        while self.proc.poll() is None:
            self.observe()
            time.sleep(0.5)

    def records(self) -> dict[int, str]:
        """Each process's record file (plugin log lines, kernel-double events), by pid."""
        return {int(f.stem): f.read_text() for f in self.record_dir.glob("*.log")}

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        """POST ``body``; raise :class:`ServerFailed` as soon as the server says a child failed
        (sglang then spends a minute on crash diagnostics before it exits)."""
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})

        def send() -> Any:
            with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT_S) as r:
                return json.loads(r.read())

        pool = concurrent.futures.ThreadPoolExecutor(1)  # not waited for: the server may hang
        try:
            answer = pool.submit(send)
            while True:
                try:
                    return answer.result(timeout=0.5)
                except concurrent.futures.TimeoutError:
                    if self.proc.poll() is not None or CHILD_FAILED in self.log():
                        raise self.fail(f"POST {path}: the server failed") from None
                except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
                    time.sleep(1.0)
                    raise self.fail(f"POST {path} failed: {exc}") from exc
        finally:
            pool.shutdown(wait=False)

    def generate(self, prompts: list[list[int]], max_new_tokens: int | list[int]) -> list[Output]:
        """Greedy completions of ``prompts`` (token ids), sent as one batch request."""
        lengths = ([max_new_tokens] * len(prompts) if isinstance(max_new_tokens, int)
                   else max_new_tokens)
        params = [{"max_new_tokens": n, "temperature": 0.0, "ignore_eos": True} for n in lengths]
        answer = self._post("/generate", {"input_ids": prompts, "sampling_params": params,
                                          "return_logprob": True})
        self.observe()
        outs = []
        for item in answer:
            meta = item["meta_info"]
            pairs = meta["output_token_logprobs"]
            outs.append(Output([int(t) for _, t, *_ in pairs], [float(lp) for lp, *_ in pairs],
                               int(meta.get("cached_tokens", 0))))
        return outs

    def flush_cache(self) -> None:
        """sglang's ``/flush_cache`` (what benchmarks call between runs): the radix cache and the
        pools emptied, and on a GPU ``torch.cuda.empty_cache()``, which hands the allocator's free
        segments back to the driver. sglang flushes only when idle: it waits for that up to
        :data:`FLUSH_WAIT_S`. Raise :class:`ServerFailed` unless sglang says it flushed."""
        req = urllib.request.Request(f"{self.url}/flush_cache?timeout={FLUSH_WAIT_S:g}",
                                     data=b"", method="POST")
        try:
            with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT_S) as r:
                said = r.read().decode(errors="replace")
        except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
            raise self.fail(f"POST /flush_cache failed: {exc}") from exc
        if not said.startswith("Cache flushed"):
            raise self.fail(f"POST /flush_cache: {said.strip()}")

    def stop(self) -> None:
        """End the tree by its own PIDs: SIGKILL to the launcher's process group and to every
        process seen in the tree (its answers are already collected; sglang's own SIGTERM path
        spends seconds on crash diagnostics). Raise if a process or a listening port is left."""
        self.observe()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        for pid in self.alive():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(STOP_GRACE_S)
        deadline = time.monotonic() + STOP_GRACE_S
        while time.monotonic() < deadline and self.alive():
            time.sleep(0.2)
        left = self.alive()
        busy = _listening(self.ports | {self.port})
        while busy and time.monotonic() < deadline:
            time.sleep(0.2)
            busy = _listening(self.ports | {self.port})
        if left or busy:
            raise AssertionError(f"left behind: processes {left}, listening ports {busy}")

    def alive(self) -> list[int]:
        """The tree's processes still running: every one seen (same pid, same start time) and
        any other in the launcher's process group; zombies excepted."""
        left: set[int] = set()
        for pid, (started, _) in self.seen.items():
            with contextlib.suppress(psutil.Error):
                p = psutil.Process(pid)
                if p.create_time() == started and p.status() != psutil.STATUS_ZOMBIE:
                    left.add(pid)
        for p in psutil.process_iter():
            with contextlib.suppress(psutil.Error):
                if _pgid(p.pid) == self.proc.pid and p.status() != psutil.STATUS_ZOMBIE:
                    left.add(p.pid)
        return sorted(left)

    def wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            self.observe()
            if self.proc.poll() is not None:
                raise self.fail("the server exited before it was ready")
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(self.url + "/get_model_info", timeout=5) as r:
                    if r.status == 200:
                        self.observe()
                        return
            time.sleep(1.0)
        raise self.fail(f"not ready after {self.ready_timeout_s:.0f} s")


def _listening(ports: set[int]) -> list[str]:
    """Sockets still listening on any of ``ports`` (``port (pid)``), by any process. Closing
    connections (TIME_WAIT, FIN_WAIT) do not count: they hold no server open."""
    return sorted(f"{c.laddr.port} (pid {c.pid})" for c in psutil.net_connections("inet")
                  if c.status == psutil.CONN_LISTEN and c.laddr.port in ports)


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def launch(model: Path, backend: str, work: Path, *, doubles: str = "aiter,rocm-host,fill-value",
           ranks: int = 1, extra: tuple[str, ...] = (), env: dict[str, str] | None = None,
           max_running: int = 8, wait: bool = True, platform: Platform = CPU,
           graph_max_bs: int | None = None, wrap: tuple[str, ...] = (),
           ready_timeout_s: float = READY_TIMEOUT_S) -> Server:
    """Start ``launch_server`` for ``model`` with ``--attention-backend backend``.

    ``doubles``: what the test plugin installs (:mod:`testkit.doubles.server_plugin`). ``ranks``:
    ``--tp``. ``wait``: block until the server answers (or raise :class:`ServerFailed`).
    ``platform``: :data:`CPU` or :data:`CUDA`; ``graph_max_bs``: on CUDA, capture decode graphs
    up to this batch (``None``: none). ``wrap``: a command the launcher runs under (for example
    ``compute-sanitizer``); ``ready_timeout_s``: how long it may take to answer.
    """
    work.mkdir(parents=True, exist_ok=True)
    record_dir = work / "records"
    record_dir.mkdir(exist_ok=True)
    site = server_plugin.site_dir(work / "site", gpu=platform.device != "cpu", doubles=doubles)
    port = _free_port()
    child_env = dict(os.environ)
    path = [str(site), str(ROOT), str(SGL_KERNEL_STUB_DIR)]
    if child_env.get("PYTHONPATH"):
        path.append(child_env["PYTHONPATH"])
    child_env.update(platform.env)
    child_env.update({
        "PYTHONPATH": os.pathsep.join(path),
        server_plugin.DOUBLES_VAR: doubles,
        aiter_kernels.RECORD_DIR_VAR: str(record_dir),
        aiter_kernels.WRONG_SLOT_FLAG_VAR: str(work / "wrong-kv-slot"),
        aiter_kernels.WRONG_MLA_SLOT_FLAG_VAR: str(work / "wrong-kv-slot"),
        "PYTHONUNBUFFERED": "1",
    })
    if platform.device == "cpu":
        child_env["SGLANG_NCCL_SO_PATH"] = str(work / "no-libnccl.so")
        if ranks > 1:
            child_env["SGLANG_CPU_OMP_THREADS_BIND"] = "|".join(str(r % 2) for r in range(ranks))
    child_env.update(env or {})
    cmd = [*wrap, sys.executable, "-m", "sglang.launch_server", "--model-path", str(model),
           *platform.flags, "--dtype", "float32", "--load-format", "safetensors",
           "--skip-tokenizer-init", "--context-length", "512", "--max-total-tokens", "4096",
           *platform.graph_flags(graph_max_bs), "--attention-backend", backend,
           "--max-running-requests", str(max_running), "--tp", str(ranks),
           "--host", "127.0.0.1", "--port", str(port), *extra]
    log_path = work / "server.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=child_env,
                                cwd=work, start_new_session=True)
    server = Server(proc, port, log_path, record_dir, ready_timeout_s=ready_timeout_s)
    threading.Thread(target=server._sample, daemon=True, name="server-sampler").start()
    if wait:
        try:
            server.wait_ready()
        except BaseException:
            server.stop()
            raise
    return server


@contextlib.contextmanager
def running(model: Path, backend: str, work: Path, **kwargs: Any) -> Iterator[Server]:
    """:func:`launch`, then :meth:`Server.stop` on exit (which checks nothing is left)."""
    server = launch(model, backend, work, **kwargs)
    try:
        yield server
    finally:
        server.stop()
