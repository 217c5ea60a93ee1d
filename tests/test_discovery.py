"""sglang finds the installed plugin by itself: entry points, load_plugins(), spawn children."""

from __future__ import annotations

from importlib.metadata import distribution
from pathlib import Path

import pytest

from testkit.subproc import run_main_script, run_python

DISCOVERY = """
from sglang.srt.plugins import load_plugins
load_plugins()
from sglang.srt.server_args import ATTENTION_BACKEND_CHOICES
from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS
import sglang_aiter_plugin
from sglang_aiter_plugin._registration import last_statuses
from testkit.plugin_state import status_dict
print("RESULT " + json.dumps({
    "choices": ATTENTION_BACKEND_CHOICES.count("aiter-ext"),
    "factory": getattr(ATTENTION_BACKENDS.get("aiter-ext"), "__module__", None),
    "aiter_wraps": getattr(
        getattr(ATTENTION_BACKENDS["aiter"], "__wrapped__", None), "__module__", None
    ),
    "statuses": [status_dict(s) for s in (last_statuses() or [])],
    "package": sglang_aiter_plugin.__file__,
}))
"""


def test_plugin_is_installed_with_its_entry_points() -> None:
    dist = distribution("sglang-aiter-plugin")
    eps = {(ep.group, ep.name): ep.value for ep in dist.entry_points}
    assert eps[("sglang.srt.plugins", "aiter_ext")] == "sglang_aiter_plugin:register"
    assert eps[("console_scripts", "sglang-aiter-plugin")] == "sglang_aiter_plugin.cli:main"


def test_sglang_load_plugins_discovers_and_runs_the_plugin() -> None:
    result = run_python(DISCOVERY)
    assert result.returncode == 0, result.stderr[-3000:]
    data = result.data
    assert data["choices"] == 1
    # aiter-ext is folded into aiter; the aiter factory chooses the class, aiter-ext fails fast
    assert data["factory"] == "sglang_aiter_plugin.fixes.attention_backend.sites"
    assert data["aiter_wraps"] == "sglang.srt.layers.attention.attention_registry"
    names = [s["name"] for s in data["statuses"]]
    assert names == ["attention-backend", "capture-all-reduce", "capture-all-gather",
                     "capture-reduce-scatter",
                     "capture-fused-ar-rmsnorm"]  # only the fixes that can act
    # once sglang imported its registry the fix is complete, and says so
    assert data["statuses"][0]["state"] == "applied"
    lines = result.stderr.splitlines()
    # the start-up line: plugin and sglang versions and every fix's outcome so far; in a bare
    # process the registry is not imported yet, so the fix says what it waits for
    at = next(i for i, ln in enumerate(lines) if "sglang-aiter-plugin 0" in ln)
    assert "on sglang " in lines[at]
    assert "attention-backend=pending" in lines[at]
    assert "when sglang imports sglang.srt.layers.attention.attention_registry" in lines[at]
    assert "capture-fused-ar-rmsnorm=skipped (not a ROCm (HIP) platform" in lines[at]
    assert "capture-all-reduce=skipped (not a ROCm (HIP) platform" in lines[at]
    # then one line with the final outcome, when sglang imports the module
    final = [ln for ln in lines[at + 1:] if "sglang-aiter-plugin: attention-backend=" in ln]
    assert len(final) == 1
    assert "attention-backend=applied" in final[0]


SPAWN = """
import multiprocessing as mp

def child(q):
    import sys
    sys.modules.setdefault("aiter", None)
    from sglang.srt.plugins import load_plugins
    load_plugins()
    from sglang.srt.server_args import ATTENTION_BACKEND_CHOICES
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS
    q.put([ATTENTION_BACKEND_CHOICES.count("aiter-ext"), "aiter-ext" in ATTENTION_BACKENDS])

if __name__ == "__main__":
    from sglang.srt.plugins import load_plugins
    load_plugins()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=child, args=(q,))
    p.start()
    got = q.get(timeout=600)
    p.join()
    print("RESULT " + json.dumps({"child": got, "exitcode": p.exitcode}))
"""


@pytest.mark.slow
def test_spawn_child_loads_the_plugin_itself(tmp_path: Path) -> None:
    result = run_main_script(tmp_path, SPAWN)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.data == {"child": [1, True], "exitcode": 0}
