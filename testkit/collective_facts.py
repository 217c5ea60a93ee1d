"""What each sglang release does on the AITER capture paths, read from the released wheels.

The plugin never uses these facts (it probes behaviour); the tests check the probes against them.
Per collective: the first release with an AITER path, and the switches under which sglang itself
captures unregistered (see the README's collectives table).
"""

from __future__ import annotations

from packaging.version import Version

from sglang_aiter_plugin.fixes.collectives import (
    ALL_GATHER,
    ALL_REDUCE,
    FUSED_AR_RMSNORM,
    REDUCE_SCATTER,
    registered,
)
from sglang_aiter_plugin.fixes.collectives.probe import Condition

__all__ = ["FIRST_WITH_FLAG_READER", "FIRST_WITH_PATH", "FIRST_WITH_PIECEWISE_FUSED",
           "FIRST_WITH_QUANT", "FIRST_WITH_VARIANTS", "METHOD_FIXES", "NEWEST_KNOWN", "has_path",
           "has_quant", "has_variants", "honoured_upstream"]

METHOD_FIXES: dict[str, str] = {m.name: fix.name for fix in registered()
                                 for m in fix.methods}
"""Each ``GroupCoordinator`` method a collective fix wraps -> that fix's name, from the fixes."""

NEWEST_KNOWN = Version("0.5.23")
FIRST_WITH_PATH = {  # by each fix's name, as its ledger entry writes it
    ALL_REDUCE.name: Version("0.5.11"),  # sglang honours TMS and the flag itself
    ALL_GATHER.name: Version("0.5.13"),
    REDUCE_SCATTER.name: Version("0.5.15"),
    FUSED_AR_RMSNORM.name: Version("0.5.11"),
}
FIRST_WITH_QUANT = Version("0.5.17")
"""``fused_allreduce_rmsnorm_quant_per_group`` (its ``transpose_scale`` parameter from 0.5.19)."""
FIRST_WITH_PIECEWISE_FUSED = Version("0.5.13")
FIRST_WITH_VARIANTS = Version("0.5.18")
"""Several decode graphs per batch size on HIP (DSA dense/sparse: 0.5.18-0.5.19 marked by
``get_capture_dsa_variant``, 0.5.20+ by ``get_capture_attention_variant``)."""
"""``fused_allreduce_rmsnorm``'s own piecewise-graph branch (``fused_ar_rms(registered=False)``)."""
FIRST_WITH_FLAG_READER = Version("0.5.22")
"""The first release whose model code reads aiter's ``enable_register_for_capturing`` outside
``GroupCoordinator``: DeepSeek-V4.1's fused all-reduce + hc_post, chosen per layer by
``_make_mhc_fusion`` (0.5.21 ships the op and its module without a caller)."""

_TMS, _COPY_IN, _FLAG = Condition.TMS, Condition.COPY_IN, Condition.COMM_FLAG


def _release(v: Version) -> Version:
    return Version(v.base_version)


def has_path(fix: str, v: Version) -> bool:
    return _release(v) >= FIRST_WITH_PATH[fix]


def has_quant(v: Version) -> bool:
    return _release(v) >= FIRST_WITH_QUANT


def has_variants(v: Version) -> bool:
    return _release(v) >= FIRST_WITH_VARIANTS


def honoured_upstream(fix: str, v: Version) -> frozenset[Condition]:
    """Conditions under which sglang ``v`` itself captures ``fix``'s collective unregistered."""
    r = _release(v)
    if fix == ALL_REDUCE.name:
        return frozenset({_TMS, _FLAG})  # copy-in is not defined for all-reduce
    if fix == FUSED_AR_RMSNORM.name:
        return frozenset()
    if fix == ALL_GATHER.name:
        if r >= Version("0.5.22"):
            return frozenset({_TMS, _COPY_IN})
        if r >= Version("0.5.15"):
            return frozenset({_TMS})
        return frozenset()
    if fix == REDUCE_SCATTER.name:
        if r >= Version("0.5.22"):
            return frozenset({_TMS, _COPY_IN})
        if r >= Version("0.5.18"):
            return frozenset({_TMS})
        return frozenset()
    raise KeyError(fix)
