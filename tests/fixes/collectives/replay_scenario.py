"""The child process of the replay tests: sglang's own decode capture loop on a simulated ROCm
host, with the plugin loaded by sglang's ``load_plugins()``.

The loop is the installed release's ``DecodeCudaGraphRunner._capture_one_stream`` (its graph
variants decided by sglang's own ``create_attention_graph_variants`` where the release has it;
0.5.18-0.5.19 set ``dsa_dual_graph`` as their runner's ``__init__`` does for a DSA model on HIP),
with what it reads of the GPU answered (free memory, the rank for its progress bar, the compile
wrapper). Its ``capture_one_shape`` runs, per group, a warm-up and a stream capture of one call
of each collective through sglang's real ``GroupCoordinator``: the full TP group (ranks 0-3,
spanning two DP ranks) and this rank's attention-TP group ([0, 1] or [2, 3]), each with the
recording communicator double (aiter e4048607). Ranks 0 and 2 are run in turn, so both DP ranks
decide. DP attention is sglang's own flag (``get_flags().dp.enabled``). The ROCm platform double
is left while the runner module is imported (its fp8 probe asks a real GPU), after
``parallel_state`` and the plugin's decisions were made on the simulated ROCm host.
"""

from __future__ import annotations

from typing import Any

from testkit.subproc import run_python

__all__ = ["SCENARIOS", "child_data"]

SCENARIOS = ("variants+dp", "one-graph+dp", "variants", "36088", "36079")
"""DSA graph variants under DP attention; a model with one graph per batch size under DP
attention; DSA variants without DP attention; the first with sglang#36088 or sglang#36079."""

CHILD = """
import logging
from contextlib import ExitStack, nullcontext
from types import SimpleNamespace
import torch
from testkit.doubles.rocm_platform import simulated_rocm
from testkit.doubles.communicator import RecordingCommunicator

rocm = simulated_rocm(is_gfx95_supported=True)
rocm.__enter__()
from sglang.srt.distributed import parallel_state as ps
from sglang.srt.plugins import load_plugins
load_plugins()
rocm.__exit__(None, None, None)  # the runner's imports ask the GPU what fp8 it has
from sglang.srt import runtime_context
from sglang.srt.model_executor.runner import decode_cuda_graph_runner as dcgr
rocm = simulated_rocm(is_gfx95_supported=True)
rocm.__enter__()
from sglang_aiter_plugin._rebind import rebound
from sglang_aiter_plugin._registration import last_statuses
try:
    from sglang_aiter_plugin.fixes.collectives import replay
    said_once = replay.SAID
except ImportError:  # a plugin without the condition (the tests then show what it misses)
    said_once = set()
from testkit import upstream_next

said = []
class Said(logging.Handler):
    def emit(self, record):
        said.append(record.getMessage())
plugin_log = logging.getLogger("sglang_aiter_plugin")
plugin_log.addHandler(Said())
plugin_log.setLevel(logging.INFO)

stream = {"capturing": False}
torch.cuda.is_current_stream_capturing = lambda: stream["capturing"]
HIDDEN = 128
DSA = SimpleNamespace(architectures=["GlmMoeDsaForCausalLM"], index_topk=2048)
DENSE = SimpleNamespace(architectures=["LlamaForCausalLM"])

def collectives(c):
    c._all_reduce_out_place(torch.ones((1, 8)), "ca")
    if "_all_gather_into_tensor" in vars(ps.GroupCoordinator):
        c._all_gather_into_tensor(torch.zeros((2, 8)), torch.ones((1, 8)))
    if "_maybe_aiter_reduce_scatter" in vars(ps.GroupCoordinator):
        c._maybe_aiter_reduce_scatter(torch.zeros((1, 8)), torch.ones((2, 8)))
    c.fused_allreduce_rmsnorm(torch.ones((1, HIDDEN)), torch.ones((1, HIDDEN)),
                              torch.ones(HIDDEN), 1e-6)

def coordinator(name, ranks, flag):
    c = object.__new__(ps.GroupCoordinator)
    c.ca_comm = RecordingCommunicator(capturing=True, register_flag=flag)
    c.world_size, c.ranks, c.unique_name = 2, ranks, name
    for absent in ("qr_comm", "pymscclpp_comm", "torch_symm_mem_comm", "pynccl_comm",
                   "pcie_ipc_comm"):
        setattr(c, absent, None)
    return c

def calls(c):
    made = [list(call) for call in c.ca_comm.calls]
    c.ca_comm.calls.clear()
    return made

loop = rebound(vars(dcgr.DecodeCudaGraphRunner)["_capture_one_stream"], {
    "get_parallel": lambda: SimpleNamespace(tp_rank=1, tp_group=None),
    "get_available_gpu_memory": lambda *a, **k: 0.0,
    "torch_compile_decoration": SimpleNamespace(
        patch_model=lambda model, *a, **k: nullcontext(model.forward)),
}, strict=False)

def run(scenario, rank, flag):
    dp = scenario != "variants"
    runtime_context.get_flags().dp.enabled = dp
    attention = [0, 1] if rank < 2 else [2, 3]
    groups = {"tp": coordinator("tp:0", [0, 1, 2, 3], flag),
              "attention_tp": coordinator("attention_tp:0", attention, flag)}
    ps._ATTN_TP = groups["attention_tp"]
    found = []

    def capture_one_shape(bs, forward, stream_idx=None, variant_label=None, variant=None):
        for name, c in groups.items():
            collectives(c)  # warm-up: capture mode, the stream not capturing
            warm = calls(c)
            stream["capturing"] = True
            try:
                collectives(c)
            finally:
                stream["capturing"] = False
            found.append({"bs": bs, "variant": variant, "group": name, "warm-up": warm,
                          "captured": calls(c)})

    runner = object.__new__(dcgr.DecodeCudaGraphRunner)
    runner.capture_bs, runner.compile_bs, runner.captured_req_width = [2, 1], [], 1
    runner.record_nolora_graph = False
    runner.model_runner = SimpleNamespace(model=SimpleNamespace(forward=None), device="cuda",
                                          gpu_id=0, tp_group=None)
    runner.capture_one_shape = capture_one_shape
    runner._set_profile_trace_tag = lambda *a, **k: None
    model = DENSE if scenario == "one-graph+dp" else DSA
    if hasattr(dcgr, "create_attention_graph_variants"):
        runner.attention_graph_variants = dcgr.create_attention_graph_variants(model)
    else:
        runner.dsa_dual_graph = model is DSA
    with ExitStack() as stack:
        try:
            stack.enter_context(runtime_context.get_parallel().override(
                attn_tp_group=groups["attention_tp"]))
        except Exception:
            pass  # a release whose get_attn_tp_group reads ps._ATTN_TP
        for c in groups.values():
            c.ca_comm._IS_CAPTURING = True
        loop(runner)
    for c in groups.values():  # eager, after the capture
        c.ca_comm._IS_CAPTURING = False
        collectives(c)
    eager = {name: calls(c) for name, c in groups.items()}
    return {"captures": found, "eager": eager}

results = {}
for scenario in SCENARIOS:
    said_once.clear()  # each scenario as a fresh process would say it
    said.clear()
    with ExitStack() as stack:
        flag = True
        if scenario == "36088":
            policy = stack.enter_context(upstream_next.registration_off_for_dsa_dp())
            runtime_context.attention_backends = lambda: ("dsa", "dsa")  # as its unit test
            runtime_context.get_flags().dp.enabled = True
            flag = policy()  # what the dispatch gives aiter's communicator in this process
        elif scenario == "36079":
            if not hasattr(dcgr, "create_attention_graph_variants"):
                results[scenario] = None
                continue
            stack.enter_context(upstream_next.no_dual_graphs_under_dp_attention())
            runtime_context.get_flags().dp.enabled = True
        ranks = {str(rank): run(scenario, rank, flag) for rank in (0, 2)}
    results[scenario] = {"ranks": ranks, "said": list(said)}
statuses = {s.name: [s.state.value, s.detail] for s in last_statuses()}
print("RESULT " + json.dumps({"statuses": statuses, "results": results}))
""".replace("SCENARIOS", repr(SCENARIOS))

_data: list[Any] = []


def child_data() -> Any:
    """The child's result (run once per test session)."""
    if not _data:
        env = {"SGLANG_DP_USE_REDUCE_SCATTER": "1", "SGLANG_USE_AITER_AG": "1",
               "SGLANG_AITER_CAPTURE_COPY_IN": "0", "SGLANG_MEMORY_SAVER_CUDA_GRAPH": "0"}
        _data.append(run_python(CHILD, env=env).data)
    return _data[0]
