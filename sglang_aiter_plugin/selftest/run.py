"""``sglang-aiter-plugin selftest``: every case, for upstream ``aiter`` and for ``aiter-ext``, in
worker processes (:mod:`.child`), so that a fault ends one case, not the run.

The parent imports neither torch nor sglang. It starts one worker per backend (``jobs`` workers
at a time: with more than two, each backend's cases are shared among several); each worker imports
sglang once, answers what this host is (versions, the GPU, the backend's own host checks), then
runs its backend's cases in turn, each within ``timeout`` seconds and ``gpu_mib`` MiB of GPU
allocations. A case that faults or runs past its time is ``crashed``: its worker is killed with
its process group and a fresh one takes the rest. ``isolate`` gives every case a worker of its
own. Nothing is left behind: the workers get the environment as a copy, each works in a temporary
folder the parent made for it and removes when it ends, however it ended.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import IO, Any, cast

from sglang_aiter_plugin.selftest.cases import CASES, KINDS, Case, by_name
from sglang_aiter_plugin.selftest.child import MARK

__all__ = ["FAILED", "Options", "Row", "Run", "device_problem", "selftest"]

FAILED = ("wrong", "raised", "crashed")
"""Outcomes that fail a case (for ``aiter-ext``: the exit status)."""


def device_problem(device: str) -> str | None:
    """Why ``--device`` cannot be used: ``None`` for ``cuda``, ``cuda:N`` and the tests' ``cpu``."""
    if re.fullmatch(r"cuda(:[0-9]+)?|cpu", device):
        return None
    return (f"--device {device!r} is not a device the self-test runs on: give cuda or cuda:N "
            "(torch's names; HIP devices are called cuda too)")


@dataclass(frozen=True)
class Options:
    device: str = "cuda"
    only: tuple[str, ...] = ()
    unsafe: bool = False
    timeout: float = 300.0
    jobs: int = 2
    gpu_mib: int = 4096
    isolate: bool = False
    """One worker per case instead of one per backend."""
    sglang_args: tuple[str, ...] = ()
    """The operator's sglang server arguments (:mod:`.deployment`); none: the self-test's own
    cases."""


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


CHILD = (sys.executable, "-m", "sglang_aiter_plugin.selftest.child")
"""The worker's command line (the device follows)."""


def selftest(options: Options, on_case: Callable[[Row], None] | None = None,
             planned: tuple[Case, ...] = CASES) -> Run:
    """Run the cases of ``planned`` (those ``options.only`` names; :mod:`.deployment` plans the
    cases of ``options.sglang_args``); ``on_case`` is called with each row as its last outcome
    comes in. Never raises for what a worker does."""
    started = time.monotonic()
    cases = by_name(list(options.only), planned) if options.only else list(planned)
    run = Run({}, [Row(c) for c in cases], options)
    _Cases(run, on_case or (lambda row: None)).run()
    run.seconds = time.monotonic() - started
    return run


class _Cases:
    """The cases of one run, shared among lanes (one backend's cases, one worker at a time)."""

    def __init__(self, run: Run, on_case: Callable[[Row], None]) -> None:
        self.run_, self.on_case = run, on_case
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.workers: set[_Worker] = set()

    def run(self) -> None:
        options = self.run_.options
        pending: dict[str, list[Row]] = {kind: [] for kind in KINDS}
        for row in self.run_.rows:
            for kind in KINDS:
                if row.case.skip:
                    self._done(row, kind, _decided("skipped", row.case.skip), 0.0)
                elif row.case.needs_gpu and options.device == "cpu":
                    self._done(row, kind, _decided(
                        "skipped", f"{row.case.why_gpu} (--device cpu runs the eager and "
                        "metadata cases)"), 0.0)
                else:
                    pending[kind].append(row)
        per_kind = max(1, options.jobs // len(KINDS))
        lanes = [(kind, rows[i::per_kind]) for kind, rows in pending.items()
                 for i in range(per_kind) if rows[i::per_kind]]
        try:
            if not lanes:  # every case decided here: a worker still says what this host is
                if (worker := self._start()) is not None:
                    self._stop(worker)
            with ThreadPoolExecutor(max_workers=max(1, options.jobs)) as pool:
                for done in [pool.submit(self._lane, kind, rows) for kind, rows in lanes]:
                    done.result()
        finally:
            self.stopping.set()
            for worker in list(self.workers):
                worker.close()

    def _lane(self, kind: str, rows: list[Row]) -> None:
        options = self.run_.options
        worker: _Worker | None = None
        try:
            for row in rows:
                if self.stopping.is_set():
                    return
                if worker is None:
                    worker = self._start()
                    if worker is None:
                        return
                begun = time.monotonic()
                outcome = worker.run({"case": row.case.name, "kind": kind,
                                      "sglang_args": list(options.sglang_args),
                                      "unsafe": options.unsafe, "gpu_mib": options.gpu_mib,
                                      "env": environment_for(row.case)}, options.timeout)
                self._done(row, kind, outcome, time.monotonic() - begun)
                if options.isolate or not worker.alive:
                    self._stop(worker)
                    worker = None
        finally:
            if worker is not None:
                self._stop(worker)

    def _start(self) -> _Worker | None:
        """A fresh worker, once it has answered what this host is; ``None`` (and the run's
        problem) when it cannot run cases here."""
        options = self.run_.options
        worker = _Worker(options.device)
        with self.lock:
            if self.stopping.is_set():
                worker.close()
                return None
            self.workers.add(worker)
        hello = worker.start(options.timeout)
        problem: str | None = None
        with self.lock:
            if "outcome" in hello:  # it faulted or timed out before any case
                problem = f"the host probe {hello['outcome']}: {hello['detail']}"
            else:
                self.run_.host = self.run_.host or hello
                problem = (f"aiter-ext cannot run here: {hello['problem']}"
                           if hello.get("problem") else None)
            if problem is not None:
                self.run_.problem = self.run_.problem or problem
                self.stopping.set()
        if problem is not None:
            self._stop(worker)
            return None
        return worker

    def _stop(self, worker: _Worker) -> None:
        worker.close()
        with self.lock:
            self.workers.discard(worker)

    def _done(self, row: Row, kind: str, outcome: dict[str, Any], seconds: float) -> None:
        with self.lock:  # one line at a time
            row.outcomes[kind] = outcome
            row.seconds += seconds
            if all(k in row.outcomes for k in KINDS):
                self.on_case(row)


class _Worker:
    """One worker process (:mod:`.child`), in a process group of its own, working in a temporary
    folder this process made for it. Its results come through a pipe that a thread drains (so a
    talkative worker never blocks on it), its stderr goes to an unnamed temporary file."""

    def __init__(self, device: str) -> None:
        self.folder = tempfile.mkdtemp(prefix="sglang-aiter-selftest-")
        self.err = tempfile.TemporaryFile("w+")
        self.answers: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.alive = True
        self.process = subprocess.Popen(
            [*CHILD, device], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err,
            text=True, env={**os.environ, "TMPDIR": self.folder}, start_new_session=True)
        # both pipes exist: Popen was asked for them
        self._stdin, self._stdout = cast(IO[str], self.process.stdin), cast(IO[str],
                                                                            self.process.stdout)
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        for line in self._stdout:
            if line.startswith(MARK):
                self.answers.put(json.loads(line[len(MARK):]))
        self.answers.put(None)

    def start(self, timeout: float) -> dict[str, Any]:
        """What the worker says this host is, once sglang is imported."""
        return self._answer(timeout)

    def run(self, spec: dict[str, Any], timeout: float) -> dict[str, Any]:
        """One case's result; ``crashed`` where the worker ended or ran past ``timeout`` seconds
        first (the worker is then no longer :attr:`alive`)."""
        try:
            self._stdin.write(json.dumps(spec) + "\n")
            self._stdin.flush()
        except OSError:  # it has already ended
            pass
        return self._answer(timeout)

    def _answer(self, timeout: float) -> dict[str, Any]:
        try:
            answer = self.answers.get(timeout=timeout)
        except queue.Empty:
            self.close()
            return _decided("crashed", f"timed out after {timeout:.0f} s (--timeout)")
        if answer is not None:
            return answer
        self.close()
        code = self.process.returncode
        how = (f"killed by signal {signal.Signals(-code).name}" if code < 0
               else f"exit status {code}")
        self.err.seek(0)
        return _decided("crashed", f"{how}: {_last_error_line(self.err.read())}")

    def close(self) -> None:
        """End the worker and everything it started; remove its folder."""
        self.alive = False
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


def environment_for(case: Case) -> dict[str, str]:
    """The settings sglang reads for ``case`` when its backend is built."""
    return {"SGLANG_USE_AITER_UNIFIED_ATTN": "1" if case.path == "unified" else "0"}


def _last_error_line(stderr: str) -> str:
    from sglang_aiter_plugin._errors import shorten

    lines = [ln.strip() for ln in stderr.strip().splitlines() if ln.strip()]
    return shorten(lines[-1], 300, quoted=False) if lines else "no output"


def _decided(outcome: str, detail: str) -> dict[str, Any]:
    return {"outcome": outcome, "detail": detail, "max_err": None, "sizes": [],
            "held_back": [], "peak_gpu_mib": None}
