"""Installing on the class: what sglang's ``HookRegistry`` would do, minus the module walk."""

from __future__ import annotations

from typing import Any

import pytest

from sglang_aiter_plugin.fixes.collectives.install import MARK, install, is_installed, layers
from testkit.subproc import run_python
from tests.fixes.collectives.scenario import METHODS


def test_sglangs_module_walk_finds_no_copy_of_any_wrapped_method(plugins_loaded) -> None:  # type: ignore[no-untyped-def]
    """``_propagate_patch`` (sglang's own) replaces module-level copies: these methods have none."""
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


def test_install_wraps_once_and_keeps_the_original_reachable() -> None:
    cls = type("Target", (_Target,), {"method": _Target.method})
    assert install(cls, "method", _double, "fix-a") is True
    assert install(cls, "method", _double, "fix-a") is False
    wrapper = vars(cls)["method"]
    assert cls().method(1) == 4
    assert getattr(wrapper, MARK) == "fix-a"
    assert wrapper.__wrapped__ is _Target.method
    assert wrapper.__doc__ == "The target's docstring."
    assert layers(cls, "method") == 1
    assert is_installed(cls, "method") is True


def test_install_refuses_what_is_not_a_plain_function() -> None:
    cls = type("Target", (), {"method": staticmethod(lambda x: x)})
    with pytest.raises(TypeError, match=r"Target\.method is staticmethod, not a function"):
        install(cls, "method", _double, "fix-a")


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
from sglang_aiter_plugin.fixes.collectives.install import is_installed, layers
c = object.__new__(ps.GroupCoordinator)
c.ca_comm = None
result = c.fused_allreduce_rmsnorm(None, None, None, 1e-6)
print("RESULT " + json.dumps({"seen": seen, "result": result,
    "ours": is_installed(ps.GroupCoordinator, "fused_allreduce_rmsnorm"),
    "layers": layers(ps.GroupCoordinator, "fused_allreduce_rmsnorm")}))
"""
    data = run_python(code).data
    assert data == {"seen": ["other"], "result": None, "ours": True, "layers": 2}
