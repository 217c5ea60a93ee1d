"""AITER custom collectives during full CUDA-graph capture: one fix per collective.

While a stream captures, aiter's *registered* collectives read the caller's tensors directly and
IPC-export their pointers when the capture ends; graph memory that cannot be exported
(torch_memory_saver under ``SGLANG_MEMORY_SAVER_CUDA_GRAPH=1``, PyTorch expandable segments)
aborts the process with ``invalid device pointer`` (and sglang 0.5.22 reports stale peer data on
replay, its reason for ``SGLANG_AITER_CAPTURE_COPY_IN=1``). Where the ranks of a group may replay
different graphs (graph variants under DP attention, :mod:`.replay`), a registered collective reads
peer buffers that are not live (sglang#36071). Each fix below is a pluggy plugin object
with its entry in the plugin's ledger: it probes the installed sglang (:mod:`.probe`) and adds
only the capture conditions sglang ignores (:mod:`.fix`). The all-reduce's fix takes on only
copy-in and the ranks replaying different graphs: sglang honours TMS and the communicator flag
for it (``tests/fixes/collectives/test_tripwires.py`` fails on a release that does not).
"""

from __future__ import annotations

from sglang_aiter_plugin._ledger import Defect
from sglang_aiter_plugin.fixes.collectives.fix import (
    AllReduceFix,
    CollectiveFix,
    Method,
    calling_with,
)

__all__ = ["ALL_GATHER", "ALL_REDUCE", "FUSED_AR_RMSNORM", "REDUCE_SCATTER", "registered"]

_FUSED = ("self", "input_", "residual_inp_", "weight_", "eps")
_QUANT = (*_FUSED, "group_size", "emit_bf16")
_HIDDEN = 128  # a multiple of the per-group quant's group size

ALL_REDUCE = AllReduceFix(
    "all-reduce", invoke=calling_with((1, 8), then=("ca",)),
    methods=(Method("_all_reduce_out_place", (("self", "input_", "outplace_all_reduce_method"),)),),
    ledger=Defect(
        "capture-all-reduce", "no registered all-reduce in a graph its ranks may replay apart",
        patches=(
            "sglang.srt.distributed.parallel_state:GroupCoordinator._all_reduce_out_place",
            "sglang.srt.distributed.parallel_state:GroupCoordinator.graph_capture (the whole "
            "capture: the communicator's registration flag as every reader sees it)",
        ),
        why="On HIP sglang captures several decode graphs per batch size for DSA models (dense "
            "and sparse, 0.5.18+; DeepSeek V4.1's candidate graphs on gfx95, 0.5.22+) and each "
            "rank picks one from its own batch. Under DP attention the ranks of a group spanning "
            "DP ranks may replay different graphs at one step; a custom all-reduce captured on "
            "the registered path bakes in the peers' buffer addresses of its own graph's capture, "
            "so a rank replaying the other graph reads peer buffers that are not live: NaN "
            "logits, token 0 repeated (sglang#36071). sglang's all-reduce follows the "
            "communicator flag, which sglang turns off under TMS only; it never reads "
            "`SGLANG_AITER_CAPTURE_COPY_IN`, which users set against the same stale-peer hazard.",
        how="Where sglang captures graph variants, or copy-in is requested, a wrapper hands a "
            "capture in which sglang marks a graph variant under DP attention in a group spanning "
            "DP ranks (or any capture under copy-in) a communicator whose `custom_all_reduce` "
            "runs with registration off for that call (aiter's `enable_register_for_capturing`, "
            "sglang's own `tms_cudagraph`): the input goes through the communicator's pre-"
            "registered buffer, the same in every graph. An attention-TP group keeps the "
            "registered path; other calls stay sglang's own. For the whole of such a capture "
            "(`GroupCoordinator.graph_capture`, warm-up included) the communicator's flag reads "
            "off to every reader, put back after: DeepSeek-V4.1's fused all-reduce + hc_post "
            "(sglang 0.5.22+, chosen per layer by `_make_mhc_fusion` on gfx95 with TP 4 while "
            "the flag is on, and run straight on aiter's communicator) then takes the all-reduce "
            "above instead; eager steps and groups under no condition keep the fused path. "
            "Another plugin wrapping `graph_capture` too (ROCm/ATOM, for its models) leaves "
            "that scope in force for the capture's body, whichever wrapper is outermost; "
            "`doctor`'s `other plugins` row names such a plugin and the nesting.",
        upstream="sgl-project/sglang#36088 (open: registration during capture off for DP "
                 "attention with the `dsa` decode backend, in sglang's communicator dispatch; the "
                 "wrapper then finds the flag off and leaves the capture to sglang) and sgl-"
                 "project/sglang#36079 (open: no dual graphs on HIP + DSA + DP attention; nothing "
                 "is marked, nothing to do).",
        steps_aside="The oldest supported sglang captures no graph variants under DP attention, "
                    "or turns registration off for them, and honours copy-in for the all-reduce "
                    "(the tripwire test `tests/fixes/collectives/test_tripwires.py` then says "
                    "so).",
    ),
    how="a wrapper makes those captures run custom_all_reduce with registration off, and the "
        "communicator's enable_register_for_capturing reads off for the whole of such a "
        "capture (GroupCoordinator.graph_capture), to every reader",
)

ALL_GATHER = CollectiveFix(
    "all-gather", invoke=calling_with((2, 8), (1, 8)),
    methods=(Method("_all_gather_into_tensor", (("self", "output", "input"),)),),
    ledger=Defect(
        "capture-all-gather", "no IPC registration of an all-gather's input when it cannot work",
        patches=(
            "sglang.srt.distributed.parallel_state:GroupCoordinator._all_gather_into_tensor",
        ),
        why="During a capture sglang's AITER all-gather (0.5.13+, `SGLANG_USE_AITER_AG`, on by "
            "default) calls aiter's `all_gather_reg`, which registers the caller's input (see the "
            "package doc). sglang 0.5.13-0.5.14 always register; 0.5.15-0.5.21 honour TMS; "
            "0.5.22+ also copy-in; no release reads aiter's `enable_register_for_capturing` here "
            "(sglang bypasses aiter's `custom_all_gather`, which would honour it).",
        how="Where the probe finds a condition the method ignores, a wrapper hands it, during a "
            "capture under that condition, a communicator whose `all_gather_reg` is "
            "`all_gather_unreg` (the input is copied into aiter's pre-registered buffer). Other "
            "calls stay sglang's own.",
        upstream="sglang 0.5.15 added TMS and 0.5.22 copy-in (`SGLANG_AITER_CAPTURE_COPY_IN`) to "
                 "this branch; the communicator flag has no upstream change yet.",
        steps_aside="The oldest supported sglang's `_all_gather_into_tensor` honours all three "
                    "conditions (0.5.23 still ignores the flag): the probe then says `not needed` "
                    "and `tests/fixes/collectives/test_tripwires.py` fails to say so.",
    ),
    how="a wrapper makes those captures call all_gather_unreg",
)

REDUCE_SCATTER = CollectiveFix(
    "reduce-scatter", invoke=calling_with((1, 8), (2, 8)),
    methods=(Method("_maybe_aiter_reduce_scatter", (("self", "output", "input"),)),),
    ledger=Defect(
        "capture-reduce-scatter", "no IPC registration of a reduce-scatter's input when unsafe",
        patches=(
            "sglang.srt.distributed.parallel_state:GroupCoordinator._maybe_aiter_reduce_scatter "
            "(0.5.15+)",
        ),
        why="During a capture sglang's AITER reduce-scatter (0.5.15+, "
            "`SGLANG_DP_USE_REDUCE_SCATTER`, on by default on HIP) calls aiter's `reduce_scatter` "
            "with `registered=True`. sglang 0.5.15-0.5.17 always register; 0.5.18-0.5.21 honour "
            "TMS; 0.5.22+ also copy-in; no release reads aiter's `enable_register_for_capturing` "
            "here (aiter's `custom_reduce_scatter` would).",
        how="Where the probe finds a condition the method ignores, a wrapper hands it, during a "
            "capture under that condition, a communicator whose `reduce_scatter` always passes "
            "`registered=False` (the input is copied into aiter's buffer). Other calls stay "
            "sglang's.",
        upstream="sgl-project/sglang#34203 (`SGLANG_MEMORY_SAVER_CUDA_GRAPH`, in 0.5.18); copy-in "
                 "came with 0.5.22. The communicator flag has no upstream change yet.",
        steps_aside="The oldest supported sglang's reduce-scatter honours every condition, the "
                    "flag included (the probe says `not needed` there, and "
                    "`tests/fixes/collectives/test_tripwires.py` turns red).",
    ),
    how="a wrapper makes those captures pass registered=False",
)

FUSED_AR_RMSNORM = CollectiveFix(
    "fused all-reduce+RMSNorm",
    invoke=calling_with((1, _HIDDEN), (1, _HIDDEN), (_HIDDEN,), then=(1e-6,)),
    methods=(
        Method("fused_allreduce_rmsnorm", (_FUSED,)),
        Method("fused_allreduce_rmsnorm_quant_per_group", (_QUANT, (*_QUANT, "transpose_scale")),
               optional=True),
    ),
    ledger=Defect(
        "capture-fused-ar-rmsnorm", "the fused all-reduce + RMSNorm registers nothing when unsafe",
        patches=(
            "sglang.srt.distributed.parallel_state:GroupCoordinator.fused_allreduce_rmsnorm",
            "sglang.srt.distributed.parallel_state:"
            "GroupCoordinator.fused_allreduce_rmsnorm_quant_per_group (0.5.17+)",
        ),
        why="With fusion on (`--enable-aiter-allreduce-fusion`; sglang 0.5.21+ turns it on for "
            "GLM-DSA models on HIP), sglang calls aiter's `custom_fused_ar_rms` (and "
            "`custom_fused_ar_rms_per_group_quant`), which pass `registered=True` during a "
            "capture whatever the conditions. No release honours any of the three.",
        how="Where the probe finds a condition a method ignores, a wrapper hands it, during a "
            "capture under that condition, a communicator whose "
            "`custom_fused_ar_rms[_per_group_quant]` is the unregistered form sglang's own "
            "piecewise-graph branch uses, `fused_ar_rms[_per_group_quant](..., "
            "registered=False)`, where it has one; else the call gives `None`, sglang's \"fusion "
            "unavailable\", and sglang runs its unfused all-reduce (which honours the conditions) "
            "and RMSNorm (which of the two is logged once per process). aiter's other fused calls "
            "that register (`custom_fused_ar_rms_quant`, `..._mxfp4_quant`, "
            "`custom_fused_qknorm_ar[_rope]`; no release calls them yet) get their unregistered "
            "forms (`fixes/collectives/wrappers.py`) in any wrapped method that starts calling "
            "them.",
        upstream="None yet (neither in sglang nor in aiter's `custom_fused_ar_rms`).",
        steps_aside="The oldest supported sglang (or the aiter it requires) honours all three "
                    "conditions for both fused calls: then the probe reports `not needed` and the "
                    "tripwire test fails.",
    ),
    how="a wrapper gives those captures the communicator's unregistered form "
        "(fused_ar_rms(registered=False)) where it has one, else None so that sglang runs its "
        "unfused all-reduce and RMSNorm (logged at the first such capture)",
)



def registered() -> tuple[CollectiveFix, ...]:
    """The collective fixes of the registry (:data:`~sglang_aiter_plugin.fixes.BUILTIN_FIXES`), in
    its order: what else names them (``doctor``'s canary, the tests) reads them from here."""
    from sglang_aiter_plugin.fixes import BUILTIN_FIXES, load

    return tuple(plugin for _, value in BUILTIN_FIXES
                 if isinstance(plugin := load(value), CollectiveFix))
