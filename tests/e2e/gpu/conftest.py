"""The GPU tier of the end-to-end servers: sglang's own ``launch_server`` tree on a CUDA GPU with
decode CUDA graphs captured at start-up and replayed while serving, through ``aiter`` and
``aiter-ext`` (aiter's kernels as capture-safe references, or aiter's real Triton
``unified_attention``), against reference servers on the same weights.

Every test here needs a CUDA device and skips cleanly without one (CI has none). On a GPU the
servers a test session needs are started together (a few at a time, sharing the GPU; each
server takes a few GiB), each answers its request sets, is stopped with nothing left behind,
and the tests assert on what they answered and logged. ``SGLANG_GPU_E2E_OUT``: a folder that
receives each server's log and records and ``runs.json`` (what the results file reports).

Topology is a scenario's configuration (``tp``, ``attn_dp``): the same driver serves any number
of GPUs.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from testkit.server import CUDA, READY_TIMEOUT_S, Output, Server, launch
from tests.e2e import workload
from tests.e2e.conftest import mla_checkpoint
from tests.e2e.serving import Run, serve

pytestmark = [pytest.mark.gpu]

POOL = 6
"""``--max-running-requests``: decode graphs are captured at [1, 2, 4, 6] (clamped to the pool)."""
GRAPH_MAX_BS = 8
PARALLEL = int(os.environ.get("SGLANG_GPU_E2E_PARALLEL", "4"))
"""How many servers share the GPU at once."""
OUT_VAR = "SGLANG_GPU_E2E_OUT"
RAGGED = "aiter,capture-safe,rocm-host,dual-gemm,graph-replays"
UNIFIED = "aiter,capture-safe,unified,rocm-host,dual-gemm,graph-replays"
REFERENCE = "dual-gemm,graph-replays"
MLA = "aiter,capture-safe,mla,rocm-host,dual-gemm,graph-replays"
"""aiter's own ``mla.py`` for the MLA decode (from the tree that
:data:`testkit.doubles.server_plugin.AITER_MLA_TREE_VAR` names), torch doubles for the rest."""
MLA_GRAPH_MAX_BS = 4
MLA_STEPS = ("small", "eviction-burst", "flush", "small-after")
"""Small batches (graphs), a burst of eager decodes above the largest graph with more than 128
distinct KV totals (aiter's split-table cache evicts every graph's table), sglang's
``/flush_cache`` (its ``torch.cuda.empty_cache()`` hands free allocator segments back to the
driver: on one GPU the evicted tables, made on the graph-capture stream, are otherwise never
handed to another allocation), then small batches again (graphs)."""
UNIFIED_ENV = (("SGLANG_USE_AITER_UNIFIED_ATTN", "1"),)
PAGE_16 = ("--page-size", "16")


@dataclasses.dataclass(frozen=True)
class Scenario:
    backend: str
    doubles: str = RAGGED
    steps: tuple[str, ...] = ("graphs", "prefix", "burst")
    env: tuple[tuple[str, str], ...] = ()
    flags: tuple[str, ...] = ()
    graphs: bool = True
    tp: int = 1
    attn_dp: int = 1
    memcheck: bool = False
    model: str = "qwen3"
    """``qwen3`` or ``deepseek`` (MLA, :mod:`testkit.tiny_deepseek`)."""
    pool: int = POOL
    graph_max_bs: int = GRAPH_MAX_BS


SCENARIOS: dict[str, Scenario] = {
    # the references: torch_native (no graphs) and sglang's own Triton backend (graphs)
    "torch_native": Scenario("torch_native", REFERENCE, ("graphs", "prefix", "burst", "long"),
                             graphs=False),
    "triton": Scenario("triton", REFERENCE, ("graphs", "prefix", "burst", "long")),
    "aiter": Scenario("aiter"),
    "aiter-ext": Scenario("aiter-ext", steps=("graphs", "prefix", "control", "burst")),
    "aiter/unified": Scenario("aiter", UNIFIED, ("graphs", "prefix"), UNIFIED_ENV),
    "aiter-ext/unified": Scenario("aiter-ext", UNIFIED, ("graphs", "prefix"), UNIFIED_ENV),
    "aiter/page-16": Scenario("aiter", steps=("long",), flags=PAGE_16),
    "aiter-ext/page-16": Scenario("aiter-ext", steps=("long",), flags=PAGE_16),
    "aiter/page-16/memcheck": Scenario("aiter", steps=("long",), flags=PAGE_16, memcheck=True),
    "aiter-ext/page-16/memcheck": Scenario("aiter-ext", steps=("long",), flags=PAGE_16,
                                           memcheck=True),
    # four GPUs, DP attention (attention-TP 2): a per-rank pool of 3, graphs captured up to 4
    "dp/torch_native": Scenario("torch_native", REFERENCE, ("graphs", "burst"), graphs=False,
                                tp=4, attn_dp=2),
    "dp/aiter": Scenario("aiter", steps=("graphs", "burst"), tp=4, attn_dp=2),
    "dp/aiter-ext": Scenario("aiter-ext", steps=("graphs", "burst"), tp=4, attn_dp=2),
    # DeepSeek-V2's attention shapes (16 heads, latent 512 + 64; float32 KV: sglang's
    # non-persistent MLA decode, no split table passed), graphs [1, 2, 4] under a pool of 16;
    # torch_native cannot serve MLA (its extend reads the latent cache as keys)
    "mla/triton": Scenario("triton", REFERENCE, MLA_STEPS, model="deepseek",
                           pool=workload.MLA_POOL, graph_max_bs=MLA_GRAPH_MAX_BS),
    "mla/aiter": Scenario("aiter", MLA, MLA_STEPS, model="deepseek", pool=workload.MLA_POOL,
                          graph_max_bs=MLA_GRAPH_MAX_BS),
    "mla/aiter-ext": Scenario("aiter-ext", MLA, MLA_STEPS, model="deepseek",
                              pool=workload.MLA_POOL, graph_max_bs=MLA_GRAPH_MAX_BS),
}

MEMCHECK = ("compute-sanitizer", "--tool", "memcheck", "--target-processes", "all",
            "--print-limit", "20")
MEMCHECK_READY_S = 480.0
"""Start-up under ``compute-sanitizer`` (every kernel instrumented, graphs captured) is slower.
The servers keep torch's caching allocator: with one allocation per tensor
(``PYTORCH_NO_CUDA_MEMORY_CACHING=1`` or ``backend:cudaMallocAsync``) sglang's decode-graph
capture fails under the sanitizer (``cudaErrorStreamCaptureUnjoined``, 2026-12-03). So memcheck
sees accesses outside the allocator's segments and device-side assertions, not a write past one
tensor into its neighbour inside a segment."""
"""Start-up under ``compute-sanitizer`` (every kernel instrumented, graphs captured) is slow."""


def _steps(server: Server, steps: tuple[str, ...], work: Path,
           a: workload.Answers) -> dict[str, list[Output]]:
    for step in steps:
        if step == "graphs":
            a.sets["graphs"] = server.generate(workload.PROMPTS, workload.STAGGERED)
        elif step == "prefix":
            workload.run_prefix_hit(server, a)
        elif step == "control":
            flag = work / "wrong-kv-slot"
            flag.touch()
            try:
                a.sets["control"] = server.generate(workload.PROMPTS, workload.STAGGERED)
            finally:
                flag.unlink()
            a.sets["after-control"] = server.generate(workload.PROMPTS, workload.STAGGERED)
        elif step == "burst":
            a.sets["burst"] = server.generate(workload.BURST_3X, workload.BURST_3X_LENGTHS)
        elif step == "long":
            a.sets["long"] = server.generate([workload.LONG], workload.LONG_NEW_TOKENS)
            a.sets["long-batch"] = server.generate(workload.LONG_BATCH, workload.LONG_NEW_TOKENS)
        elif step in ("small", "small-after"):
            a.sets[step] = server.generate(workload.SMALL, workload.SMALL_LENGTHS)
        elif step == "eviction-burst":
            a.sets[step] = server.generate(workload.EVICTION_BURST,
                                           workload.EVICTION_BURST_LENGTHS)
        elif step == "flush":
            server.flush_cache()
    return a.sets


def _serve(name: str, model: Path, work: Path) -> Run:
    s = SCENARIOS[name]
    from sglang_aiter_plugin._sglang import installed_sglang_version
    from tests.e2e.conftest import dp_flags

    version = installed_sglang_version()
    assert version is not None
    extra = (*s.flags, *(dp_flags(version) if s.attn_dp > 1 else ()))
    doubles, env = s.doubles, dict(s.env)
    from sglang.srt.environ import envs

    if not hasattr(envs, "SGLANG_FORCE_FUSED_OP_BACKEND"):  # 0.5.12
        doubles += ",native-ops,flashinfer-sampling"
        env["SGLANG_IS_FLASHINFER_AVAILABLE"] = "false"
    server = launch(model, s.backend, work, doubles=doubles, ranks=s.tp, extra=extra,
                    env=env, wait=False, max_running=s.pool, platform=CUDA,
                    graph_max_bs=s.graph_max_bs if s.graphs else None,
                    wrap=MEMCHECK if s.memcheck else (),
                    ready_timeout_s=MEMCHECK_READY_S if s.memcheck else READY_TIMEOUT_S)
    answers = workload.Answers()
    run = serve(name, server, lambda running: _steps(running, s.steps, work, answers))
    if run.failure is not None:  # what it answered before it failed
        run.answers = answers.sets
    return run


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "servers(*names): the GPU scenarios a test reads")


@pytest.fixture(scope="session")
def cuda() -> None:
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU (the GPU tier of the end-to-end servers)")


@pytest.fixture(scope="session")
def gpu_served(request: pytest.FixtureRequest, cuda: None, checkpoint: Path,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], Run]]:
    """``gpu_served(name)``: the :class:`Run` of scenario ``name``. At the first call every
    scenario the selected tests name (their ``servers`` marks) is started, :data:`PARALLEL` at
    a time."""
    wanted: list[str] = []
    for item in request.session.items:
        if any(m.args and m.args[0] is True for m in item.iter_markers("skipif")):
            continue  # skipped on this release: its servers are not started
        for mark in item.iter_markers("servers"):
            wanted += [n for n in mark.args if n not in wanted]
    runs: dict[str, concurrent.futures.Future[Run]] = {}
    pool = concurrent.futures.ThreadPoolExecutor(PARALLEL, thread_name_prefix="server")
    lock = threading.Lock()
    root = tmp_path_factory.mktemp("gpu-e2e")

    def submit(name: str) -> concurrent.futures.Future[Run]:
        with lock:
            if name not in runs:
                work = root / name.replace("/", "-")
                model = (checkpoint if SCENARIOS[name].model == "qwen3"
                         else mla_checkpoint(tmp_path_factory))
                runs[name] = pool.submit(_serve, name, model, work)
            return runs[name]

    def get(name: str) -> Run:
        for other in wanted:
            submit(other)
        return submit(name).result()

    yield get
    pool.shutdown(wait=True)
    out = os.environ.get(OUT_VAR)
    if out:
        _save(Path(out), root, {n: f.result() for n, f in runs.items() if f.done()})


def _save(out: Path, root: Path, runs: dict[str, Run]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "runs.json").write_text(json.dumps({n: r.summary() for n, r in runs.items()},
                                              indent=1))
    for name in runs:
        work = root / name.replace("/", "-")
        target = out / "servers" / name.replace("/", "-")
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy(work / "server.log", target / "server.log")
        for record in (work / "records").glob("*.log"):
            shutil.copy(record, target / f"record-{record.name}")
