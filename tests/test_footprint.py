"""A launch that does not choose ``aiter-ext`` keeps sglang exactly as upstream ships it.

What may remain: ``aiter-ext`` in the CLI choices, the registry entries, the plugin's log line.
What must not: an environment variable, an attribute on the record, an import hook that outlives
its work, a module whose loader is the plugin's, a logger that hides records from the
application's handlers.
"""

from __future__ import annotations

import pytest

from testkit.subproc import Result, run_python

LAUNCH = """
import logging, os
before = dict(os.environ)
from sglang.srt.plugins import load_plugins
load_plugins()
from sglang.srt.server_args import ServerArgs
record = ServerArgs(model_path="dummy", attention_backend="triton")
if hasattr(record, "resolve_once"):  # 0.5.19+: the plugin's fold runs first, then sglang's
    try:
        record.resolve_once()
    except Exception:  # a dummy model cannot resolve fully; the fold has run by then
        pass
from sglang_aiter_plugin._post_import import _Finder, _Loader
from sglang_aiter_plugin.fixes.attention_backend.choice import MARKER_ATTR
from sglang_aiter_plugin._registration import last_statuses
server_args = sys.modules["sglang.srt.server_args"]
loaders = [server_args.__spec__.loader, server_args.__loader__]
plugin_logger = logging.getLogger("sglang_aiter_plugin")
print("RESULT " + json.dumps({
    "env_added": sorted(set(os.environ) - set(before)),
    "marker": hasattr(record, MARKER_ATTR),
    "finders": [type(f).__name__ for f in sys.meta_path if isinstance(f, _Finder)],
    "plugin_loaders": [type(l).__name__ for l in loaders if isinstance(l, _Loader)],
    "module_loaders": [type(server_args.__loader__).__name__],
    "registry_imported": "sglang.srt.layers.attention.attention_registry" in sys.modules,
    "backend_imported": "sglang_aiter_plugin.backend" in sys.modules,
    "sites_imported": "sglang_aiter_plugin.fixes.attention_backend.sites" in sys.modules,
    "probe_imported": "sglang_aiter_plugin.fixes.collectives.probe" in sys.modules,
    "selftest_imported": sorted(m for m in sys.modules
                                if m.startswith("sglang_aiter_plugin.selftest")),
    "propagate": plugin_logger.propagate,
    "statuses": {s.name: s.state.value for s in last_statuses()},
}))
"""


@pytest.fixture(scope="module")
def launch() -> Result:
    """A launch that configures no logging and does not choose aiter-ext."""
    result = run_python(LAUNCH)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def test_a_launch_without_aiter_ext_leaves_nothing_behind(launch: Result) -> None:
    data = launch.data
    # the same launch with the plugin switched off (it then touches nothing): sglang's own writes
    control = run_python(LAUNCH, env={"SGLANG_AITER_EXT": "0"})
    assert control.returncode == 0, control.stderr[-3000:]
    assert data["statuses"]["attention-backend"] == "applied"  # the fix did run here
    assert data["env_added"] == control.data["env_added"]
    # sglang's launcher need not import the backend registry; the hook must not wait for it
    assert data["registry_imported"] is False
    assert data["backend_imported"] is False  # only a launch choosing aiter-ext needs it
    assert data["sites_imported"] is False  # nor the construction sites (start-up time)
    assert data["probe_imported"] is False  # off ROCm no collective fix probes sglang
    assert data["selftest_imported"] == []  # the self-test's harness is never loaded with it
    assert data["marker"] is False
    assert data["finders"] == []  # the import hook is gone once nothing waits
    assert data["plugin_loaders"] == []  # the modules it watched keep their own loaders
    assert data["module_loaders"] == ["SourceFileLoader"]
    assert data["propagate"] is True


APPLICATION_LOGGING = """
import logging
logging.basicConfig(level=logging.INFO, format="APP %(name)s: %(message)s")
from sglang.srt.plugins import load_plugins
load_plugins()
print("RESULT " + json.dumps({}))
"""


def test_the_line_survives_a_warning_root_level_and_the_plugins_own_level_silences_it() -> None:
    """sglang's root logger says WARNING while plugins load (it lowers it later): the line must
    still reach the application's handler, exactly once, and a level set on the plugin's logger
    wins. (At an INFO root level the line takes the same path: the handlers decide.)"""
    warning = APPLICATION_LOGGING.replace("level=logging.INFO", "level=logging.WARNING")
    shown = run_python(warning)
    assert shown.returncode == 0, shown.stderr[-3000:]
    lines = [ln for ln in shown.stderr.splitlines() if "sglang-aiter-plugin 0" in ln]
    assert len(lines) == 1, shown.stderr[-3000:]
    assert lines[0].startswith("APP sglang_aiter_plugin: ")
    silenced = run_python(warning.replace(
        "from sglang.srt.plugins", 'logging.getLogger("sglang_aiter_plugin").setLevel('
        "logging.WARNING)\nfrom sglang.srt.plugins"))
    assert silenced.returncode == 0, silenced.stderr[-3000:]
    assert "sglang-aiter-plugin 0" not in silenced.stderr


INHERITED = """
import os
from sglang.srt.plugins import load_plugins
load_plugins()
from sglang.srt.server_args import ServerArgs
from sglang_aiter_plugin.fixes.attention_backend.choice import SELECTED_ENV, is_selected
record = ServerArgs(model_path="dummy", attention_backend="aiter")
if hasattr(record, "resolve_once"):
    try:
        record.resolve_once()
    except Exception:
        pass
print("RESULT " + json.dumps({"selected": is_selected(record),
                              "env": os.environ.get(SELECTED_ENV)}))
"""


def test_an_inherited_choice_does_not_turn_an_explicit_aiter_into_aiter_ext() -> None:
    result = run_python(INHERITED, env={"SGLANG_AITER_EXT_SELECTED": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.data == {"selected": False, "env": None}


def test_with_nothing_configured_the_plugins_line_is_still_visible(launch: Result) -> None:
    lines = [ln for ln in launch.stderr.splitlines() if "sglang-aiter-plugin 0" in ln]
    assert len(lines) == 1, launch.stderr[-3000:]
    assert " INFO sglang_aiter_plugin: " in lines[0]
