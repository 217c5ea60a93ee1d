"""``sglang-aiter-plugin selftest``: every case, for upstream ``aiter`` and for ``aiter-ext``, each
in its own child process (:mod:`.child`), so that a fault ends one row, not the run.

The parent imports neither torch nor sglang: a first child answers what this host is (versions,
the GPU, the backend's own host checks); then each case runs once per backend, at most ``jobs`` at
a time, each child within ``timeout`` seconds and ``gpu_mib`` MiB of GPU allocations. Nothing is
left behind: the children get the environment as a copy, their temporary folders are their own
and removed, and a child past its time is killed with its process group.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from sglang_aiter_plugin.selftest.cases import CASES, KINDS, Case, by_name
from sglang_aiter_plugin.selftest.child import MARK

__all__ = ["FAILED", "Options", "Row", "Run", "selftest"]

FAILED = ("wrong", "raised", "crashed")
"""Outcomes that fail a case (for ``aiter-ext``: the exit status)."""


@dataclass(frozen=True)
class Options:
    device: str = "cuda"
    only: tuple[str, ...] = ()
    unsafe: bool = False
    timeout: float = 300.0
    jobs: int = 2
    gpu_mib: int = 4096


@dataclass
class Row:
    """One case: each backend's outcome (``Result.as_dict()`` of :mod:`.checks`, or ``crashed`` /
    ``skipped`` decided here) and the wall time of its children."""

    case: Case
    outcomes: dict[str, dict[str, Any]] = field(default_factory=dict)
    seconds: float = 0.0


@dataclass
class Run:
    host: dict[str, Any]
    rows: list[Row]
    options: Options
    seconds: float = 0.0
    problem: str | None = None
    """Why no case could start (the host checks failed)."""

    @property
    def exit_code(self) -> int:
        """0 when every ``aiter-ext`` case that ran passed, 1 when one failed, 2 when none could
        run (:attr:`nothing_ran`). Upstream's outcomes never count."""
        if self.problem is not None:
            return 2
        if any(r.outcomes["aiter-ext"]["outcome"] in FAILED for r in self.rows):
            return 1
        return 2 if self.nothing_ran else 0

    @property
    def nothing_ran(self) -> str | None:
        """Why no ``aiter-ext`` case ran to a verdict, or ``None``."""
        if self.problem is not None:
            return self.problem
        if any(r.outcomes["aiter-ext"]["outcome"] in ("ok", *FAILED) for r in self.rows):
            return None
        reasons = dict.fromkeys(r.outcomes["aiter-ext"]["detail"] for r in self.rows)
        return "no aiter-ext case could run here: " + "; ".join(reasons)


def selftest(options: Options) -> Run:
    """Probe the host, then run the cases; never raises for what a child does."""
    started = time.monotonic()
    cases = by_name(list(options.only)) if options.only else list(CASES)
    probe = _child({"probe": True, "device": options.device}, {}, options.timeout)
    run = Run({} if "outcome" in probe else probe, [Row(c) for c in cases], options)
    if "outcome" in probe:  # the probe itself crashed or timed out
        run.problem = f"the host probe {probe['outcome']}: {probe['detail']}"
    elif probe.get("problem"):
        run.problem = f"aiter-ext cannot run here: {probe['problem']}"
    else:
        _run_cases(run)
    run.seconds = time.monotonic() - started
    return run


def _run_cases(run: Run) -> None:
    options = run.options
    pending: list[tuple[Row, str]] = []
    for row in run.rows:
        for kind in KINDS:
            if row.case.needs_gpu and options.device == "cpu":
                row.outcomes[kind] = _decided("skipped", "graph capture needs a GPU (--device "
                                              "cpu runs the eager and metadata cases)")
            else:
                pending.append((row, kind))
    for row, kind, outcome, seconds in _in_parallel(pending, options):
        row.outcomes[kind] = outcome
        row.seconds += seconds


def _in_parallel(pending: list[tuple[Row, str]],
                 options: Options) -> Iterator[tuple[Row, str, dict[str, Any], float]]:
    """Run each (row, kind) in a child, at most ``options.jobs`` at once; yield as they end."""
    from sglang_aiter_plugin.selftest.checks import environment_for

    queue = list(pending)
    running: list[tuple[Row, str, _Child]] = []
    try:
        while queue or running:
            while queue and len(running) < max(1, options.jobs):
                row, kind = queue.pop(0)
                spec = {"case": row.case.name, "kind": kind, "device": options.device,
                        "unsafe": options.unsafe, "gpu_mib": options.gpu_mib}
                running.append((row, kind, _Child(spec, environment_for(row.case))))
            time.sleep(0.05)
            for item in list(running):
                row, kind, child = item
                outcome = child.poll(options.timeout)
                if outcome is not None:
                    running.remove(item)
                    yield row, kind, outcome, child.seconds
    finally:
        for _, _, child in running:
            child.kill()


class _Child:
    """One child process, in a process group of its own; its output goes to unnamed temporary
    files (removed when closed), so that a talkative child never blocks on a full pipe."""

    def __init__(self, spec: dict[str, Any], env: dict[str, str]) -> None:
        self.started = time.monotonic()
        self.seconds = 0.0
        self.out = tempfile.TemporaryFile("w+")
        self.err = tempfile.TemporaryFile("w+")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "sglang_aiter_plugin.selftest.child", json.dumps(spec)],
            stdout=self.out, stderr=self.err, stdin=subprocess.DEVNULL, text=True,
            env={**os.environ, **env}, start_new_session=True,
        )

    def poll(self, timeout: float) -> dict[str, Any] | None:
        """The child's result once it has ended (``None`` while it runs); past ``timeout``
        seconds it is killed and is ``crashed``."""
        elapsed = time.monotonic() - self.started
        if self.process.poll() is None and elapsed < timeout:
            return None
        timed_out = self.process.poll() is None
        self.kill()  # its process group too: nothing it started outlives it
        self.seconds = time.monotonic() - self.started
        if timed_out:
            return _decided("crashed", f"timed out after {timeout:.0f} s (--timeout)")
        return _read(self._text(self.out), self._text(self.err), self.process.returncode)

    @staticmethod
    def _text(file: IO[str]) -> str:
        file.seek(0)
        text = file.read()
        file.close()
        return text

    def kill(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.process.wait()


def _child(spec: dict[str, Any], env: dict[str, str], timeout: float) -> dict[str, Any]:
    """Run one child to its end (the host probe)."""
    child = _Child(spec, env)
    while (outcome := child.poll(timeout)) is None:
        time.sleep(0.05)
    return outcome


def _read(out: str, err: str, returncode: int) -> dict[str, Any]:
    for line in reversed(out.splitlines()):
        if line.startswith(MARK):
            result: dict[str, Any] = json.loads(line[len(MARK):])
            return result
    how = (f"killed by signal {signal.Signals(-returncode).name}" if returncode < 0
           else f"exit status {returncode}")
    return _decided("crashed", f"{how}: {_last_error_line(err)}")


def _last_error_line(stderr: str) -> str:
    from sglang_aiter_plugin._errors import shorten

    lines = [ln.strip() for ln in stderr.strip().splitlines() if ln.strip()]
    return shorten(lines[-1], 300, quoted=False) if lines else "no output"


def _decided(outcome: str, detail: str) -> dict[str, Any]:
    return {"outcome": outcome, "detail": detail, "max_err": None, "sizes": [],
            "held_back": [], "peak_gpu_mib": None}
