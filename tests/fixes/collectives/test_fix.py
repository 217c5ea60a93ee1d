"""How a collective fix installs its wrappers on sglang's class."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from sglang_aiter_plugin._ledger import Defect
from sglang_aiter_plugin._patch import MARK, wrap_once
from sglang_aiter_plugin._status import FixState, FixStatus
from sglang_aiter_plugin.fixes.collectives.fix import CollectiveFix, Decision, Method, calling_with
from sglang_aiter_plugin.fixes.collectives.wrappers import is_installed
from testkit.subproc import run_python
from tests.fixes.collectives.scenario import METHODS


def layers(cls: type, name: str) -> int:
    """How many wrappers (the plugin's and anyone's) sit on ``cls.name``."""
    fn, n = vars(cls)[name], 0
    while hasattr(fn, "__wrapped__"):
        fn, n = fn.__wrapped__, n + 1
    return n


def test_sglangs_module_walk_finds_no_copy_of_any_wrapped_method(plugins_loaded) -> None:  # type: ignore[no-untyped-def]
    """``_propagate_patch`` (sglang's own) replaces module-level copies: these methods have none,
    so setting the class attribute is all ``HookRegistry`` would do."""
    import inspect

    from sglang.srt.distributed.parallel_state import GroupCoordinator
    from sglang.srt.plugins.hook_registry import _propagate_patch

    for name in [*METHODS, "_all_reduce_out_place"]:
        original = inspect.unwrap(vars(GroupCoordinator).get(name, None) or (lambda: None))
        assert _propagate_patch(original, object(), GroupCoordinator) == 0, name


class _Target:
    def method(self, x: int) -> int:
        """The target's docstring."""
        return x + 1


def _double(original: Any) -> Any:
    def method(self: Any, x: int) -> int:
        return int(2 * original(self, x))

    return method


def test_a_wrapper_is_installed_once_and_keeps_the_original_reachable() -> None:
    cls = type("Target", (_Target,), {"method": _Target.method})
    assert is_installed(cls, "method") is False
    assert wrap_once(cls, "method", "fix-a", _double) is True
    assert wrap_once(cls, "method", "fix-a", _double) is False
    wrapper = vars(cls)["method"]
    assert cls().method(1) == 4
    assert getattr(wrapper, MARK) == "fix-a"
    assert wrapper.__wrapped__ is _Target.method
    assert wrapper.__doc__ == "The target's docstring."
    assert layers(cls, "method") == 1
    assert is_installed(cls, "method") is True


def test_a_wrapper_below_another_layer_is_still_found() -> None:
    cls = type("Target", (_Target,), {"method": _Target.method})
    wrap_once(cls, "method", "fix-a", _double)

    def outer(self: Any, x: int) -> int:  # another plugin's layer: no mark of ours on it
        return 0

    outer.__wrapped__ = vars(cls)["method"]  # type: ignore[attr-defined]
    setattr(cls, "method", outer)  # noqa: B010
    assert not hasattr(outer, MARK)
    assert is_installed(cls, "method") is True
    assert wrap_once(cls, "method", "fix-a", _double) is False
    assert layers(cls, "method") == 2


def test_a_method_that_is_not_a_plain_function_fails_the_fix_and_nothing_is_wrapped(
        monkeypatch: pytest.MonkeyPatch) -> None:
    stock = staticmethod(lambda x: x)
    cls = type("GroupCoordinator", (), {"first": _Target.method, "second": stock})
    collective = CollectiveFix("test", ledger=Defect("capture-test", "-", (), "-", "-", "-", "-"),
                               invoke=calling_with(), how="-",
                               methods=(Method("first", ()), Method("second", ())))
    decided = Decision(FixStatus(collective.name, FixState.APPLIED, "-"),
                       methods=("first", "second"))
    monkeypatch.setattr(collective, "decide", lambda cls, version: decided)
    status = collective.decide_now(SimpleNamespace(GroupCoordinator=cls, envs=None), None)
    assert status.state is FixState.FAILED
    assert "GroupCoordinator.second is staticmethod, not a function" in status.detail
    assert vars(cls)["first"] is _Target.method  # all or nothing: the function is not wrapped
    assert vars(cls)["second"] is stock


def test_another_plugins_hook_registry_hook_wraps_the_plugins_wrapper() -> None:
    """sglang applies registered hooks after every plugin's ``register()``: both layers run."""
    code = """
from testkit.doubles.rocm_platform import simulated_rocm
rocm = simulated_rocm(); rocm.__enter__()
from sglang.srt.distributed import parallel_state as ps
from sglang.srt.plugins import load_plugins
from sglang.srt.plugins.hook_registry import HookRegistry, HookType
seen = []
def other(original, *args, **kwargs):
    seen.append("other")
    return original(*args, **kwargs)
HookRegistry.register("sglang.srt.distributed.parallel_state.GroupCoordinator."
                      "fused_allreduce_rmsnorm", other, HookType.AROUND)
load_plugins()
from sglang_aiter_plugin.fixes.collectives.wrappers import is_installed
fn, layers = ps.GroupCoordinator.__dict__["fused_allreduce_rmsnorm"], 0
while hasattr(fn, "__wrapped__"):
    fn, layers = fn.__wrapped__, layers + 1
c = object.__new__(ps.GroupCoordinator)
c.ca_comm = None
result = c.fused_allreduce_rmsnorm(None, None, None, 1e-6)
print("RESULT " + json.dumps({"seen": seen, "result": result,
    "ours": is_installed(ps.GroupCoordinator, "fused_allreduce_rmsnorm"), "layers": layers}))
"""
    data = run_python(code).data
    assert data == {"seen": ["other"], "result": None, "ours": True, "layers": 2}
