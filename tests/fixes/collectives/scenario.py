"""The child process of the collectives tests: a ROCm process as far as sglang can tell.

A fresh interpreter (``SGLANG_AITER_CAPTURE_COPY_IN`` is set in its environment before sglang's
import, as 0.5.22+ reads it then) enters the ROCm platform double, imports ``parallel_state``
(as a launcher has when it loads plugins), runs sglang's real ``load_plugins()`` (plus a second
``register()`` and ``load_plugins()``), and then calls every hooked ``GroupCoordinator`` method,
and the method below the wrapper (sglang's own), with the recording communicator double for each
branch x ``SGLANG_MEMORY_SAVER_CUDA_GRAPH`` x communicator flag x communicator kind. Stream
capture is the one other simulated fact (``torch.cuda.is_current_stream_capturing``); piecewise
capture uses sglang's own context manager.
"""

from __future__ import annotations

import itertools
from typing import Any

from packaging.version import Version

from sglang_aiter_plugin.fixes.collectives.probe import Condition
from testkit.collective_facts import FIRST_WITH_PIECEWISE_FUSED, has_path, has_quant, has_variants
from testkit.collective_facts import METHOD_FIXES as METHODS  # method -> fix
from testkit.doubles.communicator import MARK
from testkit.subproc import run_python

__all__ = ["BRANCHES", "FLAGS", "KINDS", "METHODS", "cases", "child_data", "expected",
           "honoured_here", "unsafe", "wrapped"]

BRANCHES = ("capturing", "warm-up", "piecewise", "eager")
FLAGS = (True, False, None)  # the communicator's enable_register_for_capturing; None: missing
KINDS = ("full", "no-unregistered-fused")
_FUSED = ("fused_allreduce_rmsnorm", "fused_allreduce_rmsnorm_quant_per_group")

CHILD = """
import inspect, itertools, os
from contextlib import nullcontext
import torch
from testkit.doubles.rocm_platform import simulated_rocm
from testkit.doubles.communicator import CommunicatorWithoutUnregisteredFused, RecordingCommunicator

rocm = simulated_rocm(is_gfx95_supported=True)
rocm.__enter__()
from sglang.srt.distributed import parallel_state as ps
from sglang.srt.plugins import load_plugins
from sglang.srt.plugins.hook_registry import HookRegistry
import sglang_aiter_plugin
load_plugins()
sglang_aiter_plugin.register()
load_plugins()
HookRegistry.apply_hooks()
try:
    from sglang.srt.model_executor.runner_backend_utils.tc_piecewise_cuda_graph.context_manager \\
        import enable_tc_piecewise_cuda_graph as piecewise
except ImportError:
    from sglang.srt.compilation.piecewise_context_manager import (
        enable_piecewise_cuda_graph as piecewise)
from sglang_aiter_plugin._registration import last_statuses

stream = {"capturing": False}
torch.cuda.is_current_stream_capturing = lambda: stream["capturing"]
KIND = {"full": RecordingCommunicator,
        "no-unregistered-fused": CommunicatorWithoutUnregisteredFused}

def layers(fn):
    n = 0
    while hasattr(fn, "__wrapped__"):
        fn, n = fn.__wrapped__, n + 1
    return n

def args(name):
    if name == "_all_reduce_out_place":
        return torch.ones((1, 8)), "ca"
    if name == "_all_gather_into_tensor":
        return torch.full((2, 8), 3.0), torch.ones((1, 8))
    if name == "_maybe_aiter_reduce_scatter":
        return torch.full((1, 8), 3.0), torch.ones((2, 8))
    return torch.ones((1, 128)), torch.ones((1, 128)), torch.ones(128), 1e-6

def summary(name, ret, call_args):
    if name == "_all_reduce_out_place":
        return {"ret": None if ret is None else ret[0, 0].item()}
    if name in ("_all_gather_into_tensor", "_maybe_aiter_reduce_scatter"):
        return {"ret": ret, "out": call_args[0][0, 0].item()}
    return {"ret": None if ret is None else ret[0][0, 0].item()}

def call(name, method, branch, tms, flag, kind):
    os.environ["SGLANG_MEMORY_SAVER_CUDA_GRAPH"] = "1" if tms else "0"
    comm = KIND[kind](capturing=branch != "eager", register_flag=flag)
    coordinator = object.__new__(ps.GroupCoordinator)
    coordinator.ca_comm, coordinator.world_size = comm, 2
    for absent in ("qr_comm", "pymscclpp_comm", "torch_symm_mem_comm", "pynccl_comm",
                   "pcie_ipc_comm"):
        setattr(coordinator, absent, None)
    call_args = args(name)
    stream["capturing"] = branch == "capturing"
    with piecewise() if branch == "piecewise" else nullcontext():
        ret = method(coordinator, *call_args)
    stream["capturing"] = False
    return {**summary(name, ret, call_args), "calls": [list(c) for c in comm.calls]}

def outcome(fn, coordinator, call_args):
    try:
        return ["returned", repr(fn(coordinator, *call_args))]
    except Exception as exc:
        return ["raised", type(exc).__name__]

# coordinators built without __init__ (as sglang's own unit tests build them), with sglang's
# reduce-scatter off (it returns before reading ca_comm) and on; read per call through envs
bare = {}
zeros = {"_all_reduce_out_place": (torch.zeros(1, 8), "ca"),
         "_all_gather_into_tensor": (torch.zeros(2, 8), torch.zeros(1, 8)),
         "_maybe_aiter_reduce_scatter": (torch.zeros(1, 8), torch.zeros(2, 8))}
fused = (torch.zeros(1, 128), torch.zeros(1, 128), torch.ones(128), 1e-6)
for rs in ("0", "1"):
    os.environ["SGLANG_DP_USE_REDUCE_SCATTER"] = rs
    field = getattr(ps.envs, "SGLANG_DP_USE_REDUCE_SCATTER", None)
    bare[rs] = {"read": None if field is None else field.get(), "methods": {}}
    for name in METHODS:
        raw = ps.GroupCoordinator.__dict__.get(name)
        if raw is not None and hasattr(raw, "__wrapped__"):
            c = object.__new__(ps.GroupCoordinator)
            bare[rs]["methods"][name] = {"hooked": outcome(raw, c, zeros.get(name, fused)),
                                         "upstream": outcome(inspect.unwrap(raw), c,
                                                             zeros.get(name, fused))}

cases, wrappers = {}, {}
for name in METHODS:
    raw = ps.GroupCoordinator.__dict__.get(name)
    if raw is None:
        continue
    wrappers[name] = layers(raw)
    if not wrappers[name]:
        continue  # no fix installed (e.g. no AITER path in this release): nothing to compare
    upstream = inspect.unwrap(raw)
    hooked = lambda c, *a, name=name: getattr(c, name)(*a)
    for branch, tms, flag, kind in itertools.product(BRANCHES, (False, True), FLAGS, KINDS):
        key = f"{name}|{branch}|{tms}|{flag}|{kind}"
        cases[key] = {"hooked": call(name, hooked, branch, tms, flag, kind),
                      "upstream": call(name, upstream, branch, tms, flag, kind)}
statuses = {s.name: [s.state.value, s.detail] for s in last_statuses()}
reduce_layers = {n: layers(ps.GroupCoordinator.__dict__[n])
                 for n in ("all_reduce", "_all_reduce_out_place")}
print("RESULT " + json.dumps({"statuses": statuses, "layers": wrappers,
                              "all_reduce_layers": reduce_layers,
                              "registry": sorted(HookRegistry._hooks), "cases": cases,
                              "bare": bare}))
""".replace("BRANCHES", repr(BRANCHES)).replace("FLAGS", repr(FLAGS)).replace(
    "KINDS", repr(KINDS)).replace("METHODS", repr(tuple(METHODS)))

_runs: dict[bool, Any] = {}


def child_data(copy_in: bool) -> Any:
    """The child's result for one ``SGLANG_AITER_CAPTURE_COPY_IN`` value (run once per value)."""
    if copy_in not in _runs:
        env = {"SGLANG_DP_USE_REDUCE_SCATTER": "1", "SGLANG_USE_AITER_AG": "1",
               "SGLANG_AITER_CAPTURE_COPY_IN": "1" if copy_in else "0"}
        _runs[copy_in] = run_python(CHILD, env=env).data
    return _runs[copy_in]


def cases(version: Version) -> list[tuple[str, str, bool, bool | None, str]]:
    """(method, branch, tms, flag, kind) for every method this release has a path for."""
    found = []
    for method, fix in METHODS.items():
        if not wrapped(fix, version):
            continue
        if method == "fused_allreduce_rmsnorm_quant_per_group" and not has_quant(version):
            continue
        kinds = KINDS if method in _FUSED else KINDS[:1]
        found += [(method, *c) for c in itertools.product(BRANCHES, (False, True), FLAGS, kinds)]
    return found


def expected(method: str, branch: str, *, unsafe: bool, kind: str,
             version: Version) -> dict[str, Any]:
    """What sglang does on this branch when a capture with ``unsafe`` switches goes unregistered."""
    if method == "_all_reduce_out_place":  # aiter's warm-up zeros also in a piecewise split op
        if branch in ("warm-up", "piecewise"):
            return {"ret": 0.0, "calls": []}
        return {"ret": MARK, "calls": [["custom_all_reduce", branch == "capturing" and not unsafe]]}
    if method == "_all_gather_into_tensor":
        if branch == "warm-up":
            return {"ret": None, "out": 0.0, "calls": []}
        reg = branch == "capturing" and not unsafe
        return {"ret": None, "out": MARK,
                "calls": [["all_gather_reg", True] if reg else ["all_gather_unreg", False]]}
    if method == "_maybe_aiter_reduce_scatter":
        if branch == "warm-up":
            return {"ret": True, "out": 0.0, "calls": []}
        return {"ret": True, "out": MARK,
                "calls": [["reduce_scatter", branch == "capturing" and not unsafe]]}
    quant = method == "fused_allreduce_rmsnorm_quant_per_group"
    aiter = "custom_fused_ar_rms_per_group_quant" if quant else "custom_fused_ar_rms"
    unregistered = "fused_ar_rms_per_group_quant" if quant else "fused_ar_rms"
    has_piecewise = not quant and Version(version.base_version) >= FIRST_WITH_PIECEWISE_FUSED
    if branch == "eager":
        return {"ret": MARK, "calls": [[aiter, False]]}
    if branch == "warm-up" or (branch == "piecewise" and not has_piecewise):
        return {"ret": 0.0, "calls": []}  # aiter's warm-up zeros, no collective
    if branch == "capturing" and not unsafe:
        return {"ret": MARK, "calls": [[aiter, True]]}
    if kind == "full":
        return {"ret": MARK, "calls": [[unregistered, False]]}
    return {"ret": None, "calls": []}  # sglang's "fusion unavailable": its unfused path


def wrapped(fix: str, version: Version) -> bool:
    """Whether ``fix`` wraps its methods in a process without copy-in: where the release has its
    path, and for the all-reduce only where sglang captures graph variants."""
    return has_path(fix, version) and (fix != "capture-all-reduce" or has_variants(version))


def honoured_here(fix: str, honoured: frozenset[Condition]) -> frozenset[Condition]:
    """``honoured`` as this child can see it: the all-reduce honours TMS through the communicator
    sglang builds (``enable_register_for_capturing=False``), which the child builds itself with
    each flag, so only the flag (and, with the plugin, copy-in) show here."""
    if fix != "capture-all-reduce":
        return honoured
    return honoured & frozenset({Condition.COPY_IN, Condition.COMM_FLAG})


def unsafe(*, tms: bool, copy_in: bool, flag: bool | None,
           honoured: frozenset[Condition]) -> bool:
    """Whether a capture goes unregistered when exactly the ``honoured`` conditions are honoured."""
    return ((tms and Condition.TMS in honoured) or (copy_in and Condition.COPY_IN in honoured)
            or (flag is False and Condition.COMM_FLAG in honoured))
