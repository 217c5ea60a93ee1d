"""End-to-end servers: each scenario's server starts once, answers its requests, and is stopped
(with nothing left behind) before the next one starts; the tests assert on what it answered and
logged. One server tree at a time: a scenario's answers are collected in its fixture set-up."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from packaging.version import Version

from testkit.server import Output, Server, launch
from testkit.tiny_checkpoint import write_checkpoint
from tests.e2e import workload
from tests.e2e.serving import Run, serve

DP_POOL = 6
"""``--max-running-requests`` with data-parallel attention: 3 requests per attention-DP rank."""
DP_RANK_POOL = 3


RUNS: dict[str, Run] = {}
"""Every scenario run in this session (for the summary at the end)."""


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not RUNS:
        return
    terminalreporter.section("end-to-end servers")
    for name, run in RUNS.items():
        state = "ok" if run.failure is None else "failed (expected where marked)"
        terminalreporter.write_line(f"{name:28} {run.seconds:6.1f} s  peak {run.peak_rss_mib:7.0f} "
                                    f"MiB (whole tree)  {state}")
    terminalreporter.write_line(f"{'all servers':28} {sum(r.seconds for r in RUNS.values()):6.1f}"
                                f" s  peak {max(r.peak_rss_mib for r in RUNS.values()):7.0f} MiB")


RELEASES_VAR = "SGLANG_E2E_RELEASES"
"""Comma-separated releases to start servers on, or ``all``; default: the base release only."""


def serving_problem(version: Version) -> str | None:
    """Why the e2e servers do not run on this sglang release here, or ``None``."""
    from sglang_aiter_plugin._releases import BASE

    chosen = os.environ.get(RELEASES_VAR, BASE)
    if chosen == "all" or str(version) in {v.strip() for v in chosen.split(",")}:
        return None
    return (f"servers start only on {chosen} by default (CI's end-to-end budget: about 6 "
            f"minutes); one rank also served on CPU with 0.5.11 and 0.5.15 (measured): "
            f"{RELEASES_VAR}={version} (or all) runs them here")


def dp_attention_problem() -> str | None:
    """Why data-parallel attention cannot run on CPU with the installed release, or ``None``."""
    import inspect

    from sglang.srt.model_executor.forward_batch_info import ForwardBatch

    sync = getattr(ForwardBatch, "prepare_mlp_sync_batch", None)
    if sync is not None and "pin_memory=True" in inspect.getsource(sync):
        return ("DP attention's MLP sync pins host memory unconditionally "
                "(ForwardBatch.prepare_mlp_sync_batch: torch.tensor(global_num_tokens, "
                "pin_memory=True)), which needs a GPU driver: 'Found no NVIDIA driver'")
    return None


def mla_problem(version: Version) -> str | None:
    """Why the MLA (DeepSeek-architecture) servers do not run on this release, or ``None``."""
    if version != MLA_RELEASE:
        return (f"the DeepSeek-architecture servers were brought up on sglang {MLA_RELEASE} only "
                "(what their CPU path needs was found there)")
    return None


MLA_RELEASE = Version("0.5.23")


@dataclasses.dataclass(frozen=True)
class Scenario:
    backend: str
    ranks: int = 1
    doubles: str = "aiter,rocm-host,fill-value"
    env: tuple[tuple[str, str], ...] = ()
    steps: tuple[str, ...] = ("prompts", "prefix")
    model: str = "qwen3"
    """``qwen3`` (:mod:`testkit.tiny_checkpoint`) or ``deepseek`` (MLA,
    :mod:`testkit.tiny_deepseek`)."""
    flags: tuple[str, ...] = ()


SCENARIOS = {
    "single/torch_native": Scenario("torch_native"),
    "single/aiter-ext": Scenario("aiter-ext", steps=("prompts", "prefix", "control")),
    "single/aiter": Scenario("aiter"),
    # aiter's Triton kernel runs in Triton's interpreter (slow): the prefix-hit pair only, which
    # takes both of the unified path's kernels (extend after a cached prefix, then decode)
    "single/aiter-ext-unified": Scenario(
        "aiter-ext", doubles="aiter,unified,rocm-host,fill-value",
        env=(("SGLANG_USE_AITER_UNIFIED_ATTN", "1"),), steps=("prefix",)),
    "dp/torch_native": Scenario("torch_native", ranks=4, steps=("prompts",)),
    "dp/aiter-ext": Scenario("aiter-ext", ranks=4, steps=("prompts", "burst")),
    "dp/aiter": Scenario("aiter", ranks=4, steps=("prompts",)),
    # multi-head latent attention (DeepSeek-V2's attention shapes): torch_native cannot serve it
    # (its extend reads the latent cache as keys); sglang's Triton backend, in Triton's
    # interpreter, is the reference (one KV split: an eighth of the interpreter's decode work)
    "mla/triton": Scenario("triton", model="deepseek",
                           flags=("--triton-attention-num-kv-splits", "1")),
    "mla/aiter-ext": Scenario("aiter-ext", model="deepseek",
                              steps=("prompts", "prefix", "control")),
}

BURST = workload.prompts(2 * DP_POOL + 2, seed=4, lengths=(4, 24))
BURST_LENGTHS = [4 + (i * 5) % 9 for i in range(len(BURST))]


def _control(server: Server, answers: dict[str, list[Output]], flag: Path) -> None:
    flag.touch()
    try:
        answers["control"] = server.generate(workload.PROMPTS, workload.NEW_TOKENS)
    finally:
        flag.unlink()
    answers["after-control"] = server.generate(workload.PROMPTS, workload.NEW_TOKENS)


def _steps(server: Server, steps: tuple[str, ...], work: Path) -> dict[str, list[Output]]:
    a = workload.Answers()
    for step in steps:
        if step == "prompts":
            workload.run_prompts(server, a)
        elif step == "prefix":
            workload.run_prefix_hit(server, a)
        elif step == "control":
            _control(server, a.sets, work / "wrong-kv-slot")
        elif step == "burst":
            a.sets["burst"] = server.generate(BURST, BURST_LENGTHS)
    return a.sets


def dp_flags(version: Version) -> tuple[str, ...]:
    if version >= Version("0.5.22"):
        return ("--attn-dp-size", "2")
    return ("--dp-size", "2", "--enable-dp-attention")


@pytest.fixture(scope="session")
def e2e_version() -> Version:
    from sglang_aiter_plugin._sglang import installed_sglang_version

    version = installed_sglang_version()
    assert version is not None
    problem = serving_problem(version)
    if problem:
        pytest.skip(f"sglang {version} cannot serve on this CPU machine: {problem}")
    return version


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_checkpoint(tmp_path_factory.mktemp("e2e") / "tiny-qwen3", seed=0)


def mla_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny DeepSeek-V2 checkpoint (written once per session, at the first MLA server)."""
    from testkit.tiny_deepseek import write_checkpoint as write_deepseek

    root = tmp_path_factory.getbasetemp() / "tiny-deepseek-v2"
    return root if (root / "model.safetensors").is_file() else write_deepseek(root, seed=0)


@pytest.fixture(scope="session")
def served(tmp_path_factory: pytest.TempPathFactory, checkpoint: Path,
           e2e_version: Version) -> Callable[[str], Run]:
    """``served(name)``: the :class:`Run` of scenario ``name`` (started at the first request)."""
    runs: dict[str, Run] = {}

    def get(name: str) -> Run:
        if name in runs:
            return runs[name]
        s = SCENARIOS[name]
        work = tmp_path_factory.mktemp(name.replace("/", "-"))
        extra = (*s.flags, *(dp_flags(e2e_version) if s.ranks > 1 else ()))
        model = checkpoint if s.model == "qwen3" else mla_checkpoint(tmp_path_factory)
        server = launch(model, s.backend, work, doubles=s.doubles, ranks=s.ranks,
                        extra=extra, env=dict(s.env), wait=False,
                        max_running=DP_POOL if s.ranks > 1 else 8)
        runs[name] = serve(name, server, lambda running: _steps(running, s.steps, work))
        RUNS[name] = runs[name]
        return runs[name]

    return get
