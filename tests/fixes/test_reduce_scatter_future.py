"""A future sglang: the method gone, its signature changed, or every switch honoured upstream.

The real ``GroupCoordinator`` of the installed release is used; only the one method is swapped
(or deleted) for the duration of a test. In each case the fix must install nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from sglang_aiter_plugin import FixState
from sglang_aiter_plugin._sglang import installed_sglang_version
from sglang_aiter_plugin.fixes import reduce_scatter
from sglang_aiter_plugin.fixes.reduce_scatter_hook import TARGET
from sglang_aiter_plugin.plugin.spec import FixContext
from testkit.doubles import future_reduce_scatter

METHOD = "_maybe_aiter_reduce_scatter"


@pytest.fixture
def coordinator(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    from sglang.srt.distributed.parallel_state import GroupCoordinator
    from sglang.srt.plugins.hook_registry import HookRegistry

    hooks_before = list(HookRegistry._hooks.get(TARGET, []))
    yield GroupCoordinator
    assert list(HookRegistry._hooks.get(TARGET, [])) == hooks_before, "the fix registered a hook"


def _apply() -> Any:
    context = FixContext(plugin_version="test", sglang_version=installed_sglang_version())
    return reduce_scatter.aiter_ext_apply_fix(context=context)


def test_method_removed_is_skipped(coordinator: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    if METHOD in vars(coordinator):
        monkeypatch.delattr(coordinator, METHOD)
    status = _apply()
    assert status.state is FixState.SKIPPED
    assert f"has no GroupCoordinator.{METHOD}" in status.detail


def test_changed_signature_is_skipped(coordinator: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(coordinator, METHOD, future_reduce_scatter.with_an_extra_parameter,
                        raising=False)
    status = _apply()
    assert status.state is FixState.SKIPPED
    assert "(self, output, input, dim)" in status.detail
    assert "unchanged" in status.detail


def test_upstream_honouring_every_switch_is_not_needed(
    coordinator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(coordinator, METHOD, future_reduce_scatter.honouring_every_switch,
                        raising=False)
    status = _apply()
    assert status.state is FixState.NOT_NEEDED, status
    assert "already captures unregistered under" in status.detail
    for switch in ("SGLANG_MEMORY_SAVER_CUDA_GRAPH", "SGLANG_AITER_CAPTURE_COPY_IN",
                   "enable_register_for_capturing"):
        assert switch in status.detail
