"""Every batch size sglang hands the attention backend, found with sglang's own functions, and what
a backend's metadata call makes of it.

Shared by ``tests/backend/test_eager_batches.py`` and ``tests/compat/batch_limits.py`` (the
measurement table). Run :func:`main` in a fresh interpreter with ``TRITON_INTERPRET=1`` (sglang's
Triton metadata kernels then run on the CPU); it prints one ``RESULT`` line of JSON.

Per path the largest batch comes from the function sglang itself uses on that path:

* graph capture and replay, EAGLE draft and draft-extend graphs: ``get_batch_sizes_to_capture``
  (the decode runner and both draft runners call it with their model runner, which shares the
  request pool);
* eager decode, idle and extend under MLP sync: ``ForwardBatch.prepare_mlp_sync_batch`` on a full
  rank (and on an idle rank beside a full one);
* the eager warm-up and the eager input registry: ``EagerRunner``'s own maximum (0.5.14+).

The metadata check hands the batch to ``init_forward_metadata`` (eager) and compares the cumulative
lengths the kernel is handed (``kv_indptr``, ``qo_indptr``) with the batch's own.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from sglang_aiter_plugin.selftest import decode
from sglang_aiter_plugin.selftest.sglang_setup import graphs_off
from testkit.sglang_setup import SCENARIOS, Setup, configure, write_model_dir

__all__ = [
    "PATHS",
    "SCENARIOS",
    "Case",
    "Outcome",
    "check_metadata",
    "graph_max",
    "main",
    "run_cases",
]

PATHS = ("ragged", "unified")
"""Decode paths of the MHA backend: aiter's ragged paged decode, or the unified kernel
(``SGLANG_USE_AITER_UNIFIED_ATTN=1``)."""



@dataclass(frozen=True)
class Case:
    """One eager metadata call: ``kind`` backend, this rank ``mode`` with ``rows`` requests while
    the other DP rank reported ``other`` tokens."""

    kind: str
    scenario: str
    pool: int
    path: str
    graphs: bool
    mode: str
    rows: int
    other: int

    @property
    def id(self) -> str:
        graphs = "graphs" if self.graphs else "no-graphs"
        return (f"{self.kind}-{self.scenario}-P{self.pool}-{self.path}-{graphs}-"
                f"{self.mode}{self.rows}-other{self.other}")


@dataclass
class Outcome:
    case: Case
    batch: int = 0
    """Rows sglang handed the backend (after its MLP-sync padding)."""
    capacity: int = 0
    """Rows the backend's per-batch buffers hold (``kv_indptr`` entries - 1)."""
    graph: int = 0
    """The largest batch sglang's graph runners capture for this configuration."""
    error: str | None = None
    wrong: list[str] = field(default_factory=list)
    """Cumulative lengths handed to the kernel that differ from the batch's own."""

    @property
    def verdict(self) -> str:
        if self.error is not None:
            return f"raises {self.error}"
        if self.wrong:
            return "wrong metadata: " + "; ".join(self.wrong)
        return "correct"


def graph_max(setup: Setup) -> int:
    """The largest batch sglang's decode (and draft) graph runners capture for this runner."""
    return setup.max_bs


def eager_runner_max(setup: Setup) -> int | None:
    """``EagerRunner``'s maximum (input registry, warm-up batch), where a release has one."""
    try:
        from sglang.srt.model_executor.runner.eager_runner import EagerRunner
    except ImportError:
        return None
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    runner = setup.runner
    runner.max_running_requests = runner.req_to_token_pool.size
    runner.spec_algorithm = SpeculativeAlgorithm.from_string(
        setup.server_args.speculative_algorithm
    )
    runner.max_total_num_tokens = runner.token_to_kv_pool.size
    if not hasattr(runner, "attn_backend"):
        runner.attn_backend = None
    kw = {"run_warmup": False} if "run_warmup" in EagerRunner.__init__.__code__.co_varnames else {}
    # Its warm-up runs only on CUDA devices (returns at once for device "cpu").
    return int(EagerRunner(runner, **kw)._eager_max_bs)


@contextlib.contextmanager
def _decode_path(path: str) -> Iterator[None]:
    old = os.environ.get("SGLANG_USE_AITER_UNIFIED_ATTN")
    os.environ["SGLANG_USE_AITER_UNIFIED_ATTN"] = "1" if path == "unified" else "0"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("SGLANG_USE_AITER_UNIFIED_ATTN", None)
        else:
            os.environ["SGLANG_USE_AITER_UNIFIED_ATTN"] = old


def build_backend(kind: str, setup: Setup, path: str, graphs: bool) -> Any:
    """A backend as sglang builds it; with ``graphs``, after its graph state was set up."""
    with _decode_path(path):
        backend = decode.build_backend(kind, setup)
    if graphs:
        backend.init_cuda_graph_state(setup.max_bs, setup.max_bs)
    return backend


def _ints(t: Any) -> list[int]:
    return [int(x) for x in t.reshape(-1).tolist()]


def expected_lengths(fb: Any) -> dict[str, list[int]]:
    """The cumulative lengths the kernel must be handed for ``fb``."""
    seq = _ints(fb.seq_lens)
    kv = [0]
    for n in seq:
        kv.append(kv[-1] + n)
    out = {"kv_indptr": kv}
    if fb.forward_mode.is_extend():
        qo = [0]
        for n in _ints(fb.extend_seq_lens):
            qo.append(qo[-1] + n)
        out["qo_indptr"] = qo
    return out


def check_metadata(backend: Any, fb: Any, path: str) -> tuple[str | None, list[str]]:
    """Run ``init_forward_metadata`` on ``fb``; the error, or what it hands the kernel wrongly."""
    try:
        backend.init_forward_metadata(fb)
    except Exception as exc:  # what upstream raises is the measurement
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}", []
    md = backend.forward_metadata
    bs = int(fb.batch_size)
    wrong = []
    want = expected_lengths(fb)
    if not fb.forward_mode.is_extend() and path == "unified" and bs > 0:
        want["qo_indptr"] = list(range(bs + 1))
    for name, values in want.items():
        got = getattr(md, name, None)
        if got is None and name == "qo_indptr" and fb.forward_mode.is_extend():
            got = backend.qo_indptr  # 0.5.11-0.5.21: forward_extend hands the kernel this one
        if got is None:
            wrong.append(f"{name} missing")
            continue
        got_values = _ints(got)[: len(values)]
        if got_values != values:
            wrong.append(f"{name} has {len(_ints(got))} entries {got_values[-3:]}, needs "
                         f"{len(values)} ending {values[-3:]}")
    if not fb.forward_mode.is_extend() and path == "ragged":
        last = backend.kv_last_page_len
        if last.shape[0] < bs:
            wrong.append(f"kv_last_page_len holds {last.shape[0]} rows for {bs}")
    return None, wrong


def run_case(case: Case, model_dir: Path) -> Outcome:
    from testkit.batches import synced_batch

    extra = () if case.graphs else graphs_off()
    setup = configure(model_dir, SCENARIOS[case.scenario], extra, pool=case.pool)
    with setup.scope:
        backend = build_backend(case.kind, setup, case.path, case.graphs)
        table = setup.runner.req_to_token_pool.req_to_token
        table.copy_(torch.arange(table.numel(), dtype=table.dtype).view_as(table) % 997)
        others = [case.other]
        fb = synced_batch(setup, backend, case.mode, case.rows, others)
        capacity = int(backend.kv_indptr.shape[-1]) - 1
        outcome = Outcome(case, batch=int(fb.batch_size), capacity=capacity,
                          graph=graph_max(setup))
        outcome.error, outcome.wrong = check_metadata(backend, fb, case.path)
        return outcome


def run_cases(cases: list[Case], model_dir: Path) -> list[dict[str, Any]]:
    from sglang.srt.layers.attention import aiter_backend

    from testkit.doubles import aiter_backend_imports

    aiter_backend_imports.install(aiter_backend)
    rows = []
    for case in cases:
        o = run_case(case, model_dir)
        rows.append({**asdict(case), "id": case.id, "batch": o.batch, "capacity": o.capacity,
                     "graph": o.graph,
                     "error": o.error, "wrong": o.wrong, "verdict": o.verdict})
    return rows


def main(argv: list[str]) -> None:
    """``main([cases_json, model_dir])``: print ``RESULT`` with one row per case."""
    cases = [Case(**c) for c in json.loads(Path(argv[0]).read_text())]
    model_dir = write_model_dir(Path(argv[1]))
    print("RESULT " + json.dumps(run_cases(cases, model_dir)))


if __name__ == "__main__":
    main(sys.argv[1:])
