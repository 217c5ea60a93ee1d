"""The whole capture: inside ``GroupCoordinator.graph_capture`` every reader of the
communicator's registration flag sees it off under a condition, and it is back after.

The release tests run, in a child (a ROCm process as far as sglang's collectives can tell, the
plugin loaded by sglang's ``load_plugins()``), sglang's own DeepSeek-V4.1 per-layer decisions
(``_make_mhc_fusion``, ``attention_mhc_fusion``, ``moe_mhc_fusion``) and the guard of its fused
all-reduce + hc_post op (``all_reduce_mhc_post``) inside sglang's own ``graph_capture`` of a TP
group and an attention-TP group, each with the communicator double (aiter e4048607); the op's JIT
kernel and aiter's modules are doubles (:mod:`testkit.doubles.mhc_kernel`). The per-layer gate
that needs a gfx95 GPU and the model's shapes (``_can_fuse_mhc``) answers yes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from packaging.version import Version

from sglang_aiter_plugin.fixes.collectives import capture_scope
from sglang_aiter_plugin.fixes.collectives.plan import Plan
from testkit.collective_facts import FIRST_WITH_FLAG_READER
from testkit.doubles.communicator import RecordingCommunicator
from testkit.subproc import run_python

FLAG = "enable_register_for_capturing"


@contextlib.contextmanager
def _sglangs_scope(coordinator: Any) -> Iterator[str]:
    """What sglang's ``graph_capture`` does with the communicator: its capture scope."""
    with coordinator.ca_comm.capture():
        yield "context"


def _group(flag: bool = True) -> Any:
    import types

    return types.SimpleNamespace(ca_comm=RecordingCommunicator(capturing=False,
                                                               register_flag=flag))


def test_every_reader_sees_the_flag_off_for_the_whole_capture_and_its_own_value_after() -> None:
    group = _group()
    comm = group.ca_comm
    scope = capture_scope.wrapper(_sglangs_scope, lambda: Plan(copy_in=True))
    with scope(group) as context:
        assert context == "context"
        assert comm._IS_CAPTURING
        assert getattr(comm, FLAG) is False
        assert isinstance(comm, RecordingCommunicator)
        assert capture_scope.own_flag(comm, FLAG) is True  # the plugin's own checks
    assert type(comm) is RecordingCommunicator
    assert getattr(comm, FLAG) is True
    assert "_sglang_aiter_plugin_capture_scope" not in vars(comm)


def test_aiters_own_flag_readers_go_unregistered_in_the_scope() -> None:
    import torch

    group = _group()
    comm = group.ca_comm
    capturing = torch.cuda.is_current_stream_capturing
    torch.cuda.is_current_stream_capturing = lambda: True
    try:
        with capture_scope.wrapper(_sglangs_scope, lambda: Plan(copy_in=True))(group):
            comm.custom_all_gather(torch.ones((1, 8)))
            comm.custom_reduce_scatter(torch.ones((2, 8)), torch.zeros((1, 8)))
            comm.custom_all_reduce(torch.ones((1, 8)))
    finally:
        torch.cuda.is_current_stream_capturing = capturing
    assert comm.calls == [("all_gather_unreg", False), ("reduce_scatter", False),
                          ("custom_all_reduce", False)]


@pytest.mark.parametrize("plan", [Plan(), None], ids=["no-condition", "fix-not-applied"])
def test_a_capture_under_no_condition_keeps_the_flag(plan: Plan | None) -> None:
    group = _group()
    with capture_scope.wrapper(_sglangs_scope, lambda: plan)(group):
        assert getattr(group.ca_comm, FLAG) is True


def test_the_condition_is_read_at_each_access() -> None:
    """A condition that holds for one graph of the scope only (a marked variant) counts there."""
    group = _group()
    holds = {"now": False}
    plan = Plan(replay=lambda coordinator, communicator: holds["now"])
    with capture_scope.wrapper(_sglangs_scope, lambda: plan)(group):
        assert getattr(group.ca_comm, FLAG) is True
        holds["now"] = True
        assert getattr(group.ca_comm, FLAG) is False
        holds["now"] = False
        assert getattr(group.ca_comm, FLAG) is True


def test_a_write_in_the_scope_is_the_communicators_own_and_stays() -> None:
    group = _group()
    with capture_scope.wrapper(_sglangs_scope, lambda: Plan(copy_in=True))(group):
        setattr(group.ca_comm, FLAG, False)
        assert capture_scope.own_flag(group.ca_comm, FLAG) is False
    assert getattr(group.ca_comm, FLAG) is False


def test_a_communicator_without_the_flag_is_left_alone() -> None:
    group = _group()
    del group.ca_comm.enable_register_for_capturing
    with capture_scope.wrapper(_sglangs_scope, lambda: Plan(copy_in=True))(group):
        assert type(group.ca_comm) is RecordingCommunicator
        assert not hasattr(group.ca_comm, FLAG)


CHILD = """
import os
from contextlib import nullcontext
from types import SimpleNamespace
import torch
from testkit.doubles.rocm_platform import simulated_rocm
from testkit.doubles.communicator import RecordingCommunicator
from testkit.doubles import mhc_kernel

rocm = simulated_rocm(is_gfx95_supported=True)
rocm.__enter__()
from sglang.srt.distributed import parallel_state as ps
from sglang.srt.plugins import load_plugins
load_plugins()
rocm.__exit__(None, None, None)
from sglang_aiter_plugin._registration import last_statuses
from sglang_aiter_plugin._rebind import rebound
from sglang.srt import runtime_context
from sglang.srt.model_executor.runner_utils import capture_mode
from sglang.srt.models.deepseek_common.amd import deepseek_v4_fused_mhc as mhc
sys.modules.update(mhc_kernel.aiter_modules())
from sglang.kernels.ops.communication import all_reduce_mhc_hip as op
kernel = mhc_kernel.install(op)

stream = {"capturing": False}
torch.cuda.is_current_stream_capturing = lambda: stream["capturing"]
STREAM = SimpleNamespace(wait_stream=lambda other: None)
ps.get_current_device_stream_fast = lambda: STREAM  # graph_capture waits on no other stream

def coordinator(name, ranks):
    c = object.__new__(ps.GroupCoordinator)
    c.ca_comm = RecordingCommunicator(capturing=False)
    c.ca_comm.world_size = 4  # the fused op is TP 4 only
    c.world_size, c.ranks, c.unique_name = 4, ranks, name
    c.device_module = SimpleNamespace(stream=lambda s: nullcontext())
    for absent in ("qr_comm", "pymscclpp_comm", "torch_symm_mem_comm", "pynccl_comm",
                   "pcie_ipc_comm"):
        setattr(c, absent, None)
    return c

rows = 2
residual = torch.zeros((rows, 4, mhc.MHC_HIDDEN_SIZE), dtype=torch.bfloat16)
coefficients = SimpleNamespace(materialize=lambda: None, post=torch.zeros((rows, 4)),
                               comb=torch.zeros((rows, 4, 4)))
layer = SimpleNamespace(
    self_attn=SimpleNamespace(attn_tp_size=4, wo_b=SimpleNamespace(reduce_results=True)),
    mlp=SimpleNamespace(tp_size=4, _shared_expert_tp1=False))

def layer_decisions(tp, attention):
    parallel = SimpleNamespace(tp_group=tp, attn_tp_group=attention)
    gate = {"_can_fuse_mhc": lambda *args: True,  # gfx95, DeepSeek-V4.1's shapes, TP 4
            "get_parallel": lambda: parallel}
    attention_fusion = rebound(mhc.attention_mhc_fusion, gate)
    moe_fusion = rebound(mhc.moe_mhc_fusion, {
        **gate, "get_moe_a2a_backend": lambda: SimpleNamespace(is_none=lambda: True),
        "should_skip_post_experts_all_reduce": lambda **kwargs: False})
    return {
        "attention_mhc_fusion": attention_fusion(layer, residual, coefficients, None) is not None,
        "moe_mhc_fusion": moe_fusion(layer, residual, coefficients, None) is not None,
        "_make_mhc_fusion": {
            name: mhc._make_mhc_fusion(residual, coefficients, group.ca_comm) is not None
            for name, group in (("tp", tp), ("attention_tp", attention))},
    }

def fused_op(group):
    kernel.launches.clear()
    try:
        op.all_reduce_mhc_post(torch.zeros((rows, mhc.MHC_HIDDEN_SIZE), dtype=torch.bfloat16),
                               residual, coefficients.post, coefficients.comb, group.ca_comm)
    except AssertionError:
        return "refused"
    return "registered capture" if kernel.launches[-1]["pool_ptr"] == 0 else "through the pool"

def all_reduce(group):
    group.ca_comm.calls.clear()
    group._all_reduce_out_place(torch.ones((1, 8)), "ca")
    return [list(call) for call in group.ca_comm.calls]

def step(tp, attention):
    return {**layer_decisions(tp, attention), "op": fused_op(tp), "all_reduce": all_reduce(tp)}

def run(replay):
    runtime_context.get_flags().dp.enabled = replay
    tp, attention = coordinator("tp:0", [0, 1, 2, 3]), coordinator("attention_tp:0", [0, 1])
    ps._ATTN_TP = attention
    with runtime_context.get_parallel().override(attn_tp_group=attention):
        if replay:
            capture_mode._set_capture_attention_variant("dense")
        with tp.graph_capture(stream=STREAM), attention.graph_capture(stream=STREAM):
            warm_up = layer_decisions(tp, attention)
            stream["capturing"] = True
            try:
                captured = step(tp, attention)
            finally:
                stream["capturing"] = False
        capture_mode._set_capture_attention_variant(None)
        after = {name: [getattr(g.ca_comm, "enable_register_for_capturing"),
                        type(g.ca_comm) is RecordingCommunicator]
                 for name, g in (("tp", tp), ("attention_tp", attention))}
        eager = step(tp, attention)
    return {"warm-up": warm_up, "captured": captured, "after": after, "eager": eager}

results = {"replay": run(True)} if os.environ["SGLANG_AITER_CAPTURE_COPY_IN"] == "0" else {}
results["plain"] = run(False)
statuses = {s.name: [s.state.value, s.detail] for s in last_statuses()}
print("RESULT " + json.dumps({"statuses": statuses, "results": results}))
"""

_data: dict[str, Any] = {}


@pytest.fixture(scope="module")
def flag_reader(sglang_version: Version) -> None:
    if Version(sglang_version.base_version) < FIRST_WITH_FLAG_READER:
        pytest.skip(f"sglang {sglang_version} has no reader of the communicator's flag outside "
                    f"GroupCoordinator (DeepSeek-V4.1's fused all-reduce + hc_post is chosen from "
                    f"{FIRST_WITH_FLAG_READER})")


def child(copy_in: str) -> Any:
    if copy_in not in _data:
        env = {"SGLANG_AITER_CAPTURE_COPY_IN": copy_in, "SGLANG_MEMORY_SAVER_CUDA_GRAPH": "0"}
        _data[copy_in] = run_python(CHILD, env=env).data
    return _data[copy_in]


FUSED_EVERYWHERE = {"attention_mhc_fusion": True, "moe_mhc_fusion": True,
                    "_make_mhc_fusion": {"tp": True, "attention_tp": True}}
UNFUSED_EVERYWHERE = {"attention_mhc_fusion": False, "moe_mhc_fusion": False,
                      "_make_mhc_fusion": {"tp": False, "attention_tp": False}}


def test_under_copy_in_every_layer_takes_the_all_reduce_for_the_whole_capture(
        flag_reader: None) -> None:
    """Today's main: every decision fuses and the op captures registered."""
    run = child("1")["results"]["plain"]
    assert run["warm-up"] == UNFUSED_EVERYWHERE
    assert {k: v for k, v in run["captured"].items() if k in UNFUSED_EVERYWHERE} == \
        UNFUSED_EVERYWHERE
    assert run["captured"]["op"] == "refused"  # the fused op's guard sees the flag off too
    assert run["captured"]["all_reduce"] == [["custom_all_reduce", False]]


def test_after_the_capture_the_flag_is_back_and_eager_steps_fuse(flag_reader: None) -> None:
    for copy_in in ("1", "0"):
        run = child(copy_in)["results"]["plain"]
        assert run["after"] == {"tp": [True, True], "attention_tp": [True, True]}
        assert {k: v for k, v in run["eager"].items() if k in FUSED_EVERYWHERE} == \
            FUSED_EVERYWHERE
        assert run["eager"]["op"] == "through the pool"


def test_without_a_condition_the_capture_keeps_the_fused_registered_path(
        flag_reader: None) -> None:
    run = child("0")["results"]["plain"]
    assert run["warm-up"] == FUSED_EVERYWHERE
    assert run["captured"]["op"] == "registered capture"
    assert run["captured"]["all_reduce"] == [["custom_all_reduce", True]]


def test_only_the_group_under_the_condition_reads_the_flag_off(flag_reader: None) -> None:
    """Ranks that may replay different graphs (a marked variant under DP attention): the TP
    group, which spans DP ranks, reads it off; the attention-TP group keeps the fused path."""
    run = child("0")["results"]["replay"]
    for phase in ("warm-up", "captured"):
        assert run[phase]["_make_mhc_fusion"] == {"tp": False, "attention_tp": True}, phase
    assert run["captured"]["all_reduce"] == [["custom_all_reduce", False]]
    assert run["after"] == {"tp": [True, True], "attention_tp": [True, True]}
    assert run["eager"]["_make_mhc_fusion"] == {"tp": True, "attention_tp": True}


def test_the_all_reduce_fix_says_it_covers_the_whole_capture(flag_reader: None) -> None:
    for copy_in in ("1", "0"):
        state, detail = child(copy_in)["statuses"]["capture-all-reduce"]
        assert state == "applied"
        assert "reads off for the whole of such a capture (GroupCoordinator.graph_capture)" \
            in detail
