"""CUDA-graph set-up of a pooled backend, under either name sglang calls it
(``init_static_metadata_buffers`` from sglang#28763/#28764), running upstream's under the name
upstream has."""

from __future__ import annotations

from typing import Any

from sglang_aiter_plugin._errors import AiterExtError
from sglang_aiter_plugin._status import FixState, FixStatus, report
from sglang_aiter_plugin._switches import bounds_check_requested
from sglang_aiter_plugin.backend.bounds_check import install_bounds_check
from sglang_aiter_plugin.backend.pool import BufferPool

__all__ = ["PooledGraphState", "StaleBindingError", "outcome"]


class StaleBindingError(AiterExtError, RuntimeError):
    """Upstream's graph set-up replaced a buffer the pool owns, behind the pool."""


def outcome(defect: str, acted: bool, applied: str, not_needed: str) -> FixStatus:
    """What graph set-up did about the ``backend.defects`` row ``defect``: ``applied`` (what it
    did) where it acted, ``not needed`` (what upstream does itself) where it did not."""
    if acted:
        return FixStatus(defect, FixState.APPLIED, applied)
    return FixStatus(defect, FixState.NOT_NEEDED, not_needed)


class PooledGraphState:
    """Mixin before sglang's backend class: the graph set-up grows the pool to ``max_bs``, runs
    upstream's set-up, rights what it leaves wrong beyond the rows, verifies every binding,
    freezes the pool and installs the bounds check if asked for."""

    buffer_pool: BufferPool
    rows_defect = "rows"  # the ledger row this pool's rows answer
    graph_fixes: tuple[FixStatus, ...] = ()
    """What the last graph set-up did, one status per ``backend.defects`` row it decides (also
    reported through :func:`._status.report`, to the log line and this process's statuses)."""

    def _before_upstream(self, max_bs: int) -> None:
        """Checks that must hold before upstream's set-up runs (none by default)."""

    def _after_upstream(self, max_bs: int, max_num_tokens: int, lent: bool) -> list[FixStatus]:
        """Right what upstream's set-up leaves wrong beyond the rows; one status per defect."""
        return []

    def _extra_per_row(self) -> int:
        """Entries a graph replay writes per row beyond ``seq_len * topk`` (the bounds check)."""
        return int(getattr(self, "num_draft_tokens", None) or 0)

    def init_cuda_graph_state(self, max_bs: int, max_num_tokens: int, *args: Any,
                              **kw: Any) -> None:
        self._set_up("init_cuda_graph_state", max_bs, max_num_tokens, *args, **kw)

    def init_static_metadata_buffers(self, max_bs: int, max_num_tokens: int, *args: Any,
                                     **kw: Any) -> None:
        self._set_up("init_static_metadata_buffers", max_bs, max_num_tokens, *args, **kw)

    def _set_up(self, called: str, max_bs: int, max_num_tokens: int, *args: Any,
                **kw: Any) -> None:
        pool = self.buffer_pool
        owner = type(self).__name__
        check = bounds_check_requested()
        grew = pool.grow(max_bs, reason=f"{owner}.{called}(max_bs={max_bs})")
        self._before_upstream(max_bs)
        parent: Any = super()  # upstream's set-up, under the name the installed release gives it
        upstream = getattr(parent, "init_static_metadata_buffers", None)
        (upstream or parent.init_cuda_graph_state)(max_bs, max_num_tokens, *args, **kw)
        lent = bool(args) or kw.get("kv_indices_buf") is not None
        fixes = self._after_upstream(max_bs, max_num_tokens, lent)
        stale = pool.stale_bindings()
        if stale:
            raise StaleBindingError(
                f"{owner}: sglang's {called} replaced pooled buffers behind the pool: {stale}. "
                "This sglang release is not supported by sglang-aiter-plugin; run "
                "--attention-backend aiter meanwhile."
            )
        pool.freeze(f"CUDA graphs are captured against the current buffers (set up by "
                    f"{owner}.{called})")
        if check:
            install_bounds_check(self, pool.capacity, self._extra_per_row())
        short = pool.reallocated if not grew else tuple(pool.names())
        self.graph_fixes = (outcome(
            self.rows_defect, bool(short),
            f"{', '.join(short)} hold {pool.capacity} rows: {pool.bytes_beyond_handed():,} "
            "bytes beyond upstream's own allocation",
            f"upstream sized every per-batch buffer for {pool.capacity} rows"), *fixes)
        if not lent:  # a draft child's (lent buffers) are its parent's to report
            report(*self.graph_fixes, where=f"{owner}.{called}(max_bs={max_bs})", always=False)
