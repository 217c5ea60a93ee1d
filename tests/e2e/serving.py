"""One server's run, as every end-to-end tier collects it: started, asked its request sets,
stopped (nothing left behind), and what it answered and logged kept for the tests."""

from __future__ import annotations

import dataclasses
import re
import time
from collections import Counter
from collections.abc import Callable

from testkit.server import Output, Server, ServerFailed

__all__ = ["Run", "serve"]


@dataclasses.dataclass
class Run:
    """What one server answered and logged, collected while it ran."""

    name: str
    answers: dict[str, list[Output]]
    launcher: int
    """The pid of the ``launch_server`` process (the root of the tree)."""
    tree: dict[int, str]
    """pid -> command line (sglang's process titles) of every process seen in the tree."""
    records: dict[int, str]
    """pid -> the process's record file (plugin log lines, kernel-double events)."""
    log: str
    failure: ServerFailed | None
    ready_s: float | None
    seconds: float
    peak_rss_mib: float

    def lines(self) -> list[str]:
        return [line for r in self.records.values() for line in r.splitlines()]

    def captured(self) -> list[int]:
        """The decode graph sizes sglang captured (the ``graph-replays`` recorder's line)."""
        found = [m[1] for line in self.lines()
                 if (m := re.search(r"graph captured bs=\[(.*)\]", line))]
        assert len(found) == 1, found
        return [int(x) for x in found[0].split(",")]

    def replays(self) -> list[tuple[int, int]]:
        """(graph size, real batch) per decode graph replay, in order."""
        return [(int(m[1]), int(m[2])) for line in self.lines()
                if (m := re.search(r"graph replay bs=(\d+) raw_bs=(\d+)", line))]

    def errors(self) -> list[str]:
        return [line for line in self.log.splitlines()
                if " ERROR " in line or "Traceback" in line or "Exception" in line]

    def sanitized(self) -> bool:
        """The server ran under compute-sanitizer (its banner is in the log)."""
        return "COMPUTE-SANITIZER" in self.log

    def memcheck_errors(self) -> list[str]:
        """compute-sanitizer's reports as they occurred (the tree is killed at the end, before
        any summary)."""
        return re.findall(r"========= (Invalid .*|Program hit .*|Warp assert.*|Out-of-range .*"
                          r"|Misaligned .*)", self.log)

    def summary(self) -> dict[str, object]:
        replays = self.replays()
        return {
            "failure": None if self.failure is None else str(self.failure)[-3000:],
            "ready_s": self.ready_s, "seconds": round(self.seconds, 1),
            "captured": self.captured() if any("graph captured" in x for x in self.lines())
            else None,
            "replays_per_bs": dict(sorted(Counter(bs for bs, _ in replays).items())),
            "replays_per_raw_bs": dict(sorted(Counter(raw for _, raw in replays).items())),
            "errors": self.errors()[:10],
            "memcheck": {"sanitized": self.sanitized(), "errors": len(self.memcheck_errors()),
                         "first": self.memcheck_errors()[:5]},
            "answers": {k: [dataclasses.asdict(o) for o in v] for k, v in self.answers.items()},
        }


def serve(name: str, server: Server,
          steps: Callable[[Server], dict[str, list[Output]]]) -> Run:
    """Wait for ``server`` (started with ``wait=False``), run ``steps`` on it, stop it; a
    :class:`ServerFailed` on the way is kept as the run's failure."""
    start = time.monotonic()
    answers: dict[str, list[Output]] = {}
    failure: ServerFailed | None = None
    ready = None
    try:
        server.wait_ready()
        ready = round(time.monotonic() - start, 1)
        answers = steps(server)
    except ServerFailed as exc:
        failure = exc
    finally:
        records = server.records()
        server.stop()
    tree = {pid: title for pid, (_, title) in server.seen.items()}
    return Run(name, answers, server.proc.pid, tree, records, server.log(), failure, ready,
               time.monotonic() - start, server.peak_rss / 2**20)
