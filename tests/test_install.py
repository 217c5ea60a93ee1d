"""The wheel a user installs: built from the tracked sources, installed into a fresh environment.

The fresh environment gets sglang and its dependencies from this one (a folder of links to its
site-packages, this project left out), so the wheel is the only copy of the plugin it sees. Every
check runs from outside the source tree.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]

LOADER = """
import json, sys
sys.modules.setdefault("aiter", None)
from importlib.metadata import distribution
from sglang.srt import plugins
import sglang_aiter_plugin
found = {ep.name: ep.value for ep in plugins.entry_points(group=plugins.GENERAL_PLUGINS_GROUP)}
loaded = plugins.load_plugins_by_group(plugins.GENERAL_PLUGINS_GROUP,
                                       excluded_dists=plugins._get_excluded_dists())
print("RESULT " + json.dumps({"found": found, "loaded": sorted(loaded),
                              "package": sglang_aiter_plugin.__file__}))
"""


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{cmd}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def _result(stdout: str) -> dict[str, object]:
    line = next(ln for ln in reversed(stdout.splitlines()) if ln.startswith("RESULT "))
    data: dict[str, object] = json.loads(line[len("RESULT "):])
    return data


def _dependencies_without_this_project(target: Path) -> Path:
    """Links to every entry of this environment's site-packages except this project's."""
    site = Path(sysconfig.get_paths()["purelib"])
    target.mkdir()
    for entry in site.iterdir():
        if entry.suffix == ".pth" or "sglang_aiter_plugin" in entry.name:
            continue
        (target / entry.name).symlink_to(entry)
    return target


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``python -m build --wheel``, as the README says, in a clone-like copy of the tracked files;
    the build leaves nothing in the tree but the ignored ``dist/``."""
    tmp = tmp_path_factory.mktemp("build")
    files = _run(["git", "ls-files", "-z"], ROOT).split("\0")
    source = tmp / "source"
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    _run(["git", "init", "-q"], source)
    _run(["git", "add", "-A"], source)
    _run([sys.executable, "-m", "build", "--wheel", "--no-isolation"], source)
    status = _run(["git", "status", "--porcelain", "--ignored", "--untracked-files=all"], source)
    left = [ln for ln in status.splitlines() if not ln.startswith("A  ")]
    (built,) = (source / "dist").glob("sglang_aiter_plugin-*.whl")
    assert left == [f"!! dist/{built.name}"]  # no egg-info, no build/, dist/ ignored
    return built


def test_the_wheel_holds_the_package_its_type_marker_and_entry_points(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        (eps,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        entry_points = zf.read(eps).decode()
    assert "sglang_aiter_plugin/py.typed" in names
    assert "sglang_aiter_plugin/__init__.py" in names
    assert not [n for n in names if n.startswith(("tests/", "testkit/", "benchmarks/", "gpu/"))]
    assert "[sglang.srt.plugins]\naiter_ext = sglang_aiter_plugin:register" in entry_points
    assert "sglang-aiter-plugin = sglang_aiter_plugin.cli:main" in entry_points


def test_the_wheels_metadata_stays_small(wheel: Path) -> None:
    """sglang's loader parses this whole file (``ep.dist.name``) in every process it starts, so
    the long description is ``PYPI.md``, not the 23 KB README."""
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        size = len(zf.read(name))
    assert size < 4096, f"METADATA is {size} bytes: keep pyproject's readme (PYPI.md) short"


def test_a_fresh_environment_with_the_wheel_runs_the_plugin(
    wheel: Path, tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], tmp_path)
    python = venv / "bin" / "python"
    deps = _dependencies_without_this_project(tmp_path / "deps")
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                      "['purelib'])"], tmp_path).strip())
    (site / "zz_sglang_deps.pth").write_text(f"{deps}\n")
    _run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
         tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_", "PYTHON"))}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    data = _result(_run([str(python), "-c", LOADER], elsewhere, env))
    assert data["found"] == {"aiter_ext": "sglang_aiter_plugin:register"}
    assert data["loaded"] == ["aiter_ext"]
    assert str(data["package"]).startswith(str(site))  # the installed copy, not the checkout
    installed = Path(str(data["package"])).parent
    assert (installed / "py.typed").is_file()
    version = _run([str(venv / "bin" / "sglang-aiter-plugin"), "--version"], elsewhere, env)
    assert version.strip() == wheel.name.split("-")[1]


def test_an_uninstalled_checkout_does_not_load_the_plugin_from_the_repository_root(
    tmp_path: Path,
) -> None:
    """After `pip uninstall`, nothing in the tree (no *.egg-info) makes sglang find the plugin."""
    assert list(ROOT.glob("*.egg-info")) == []
    deps = _dependencies_without_this_project(tmp_path / "deps")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_", "PYTHON"))}
    env["PYTHONPATH"] = str(deps)
    code = LOADER.replace("import sglang_aiter_plugin\n", "").replace(
        ',\n                              "package": sglang_aiter_plugin.__file__', "")
    data = _result(_run([sys.executable, "-S", "-c", code], ROOT, env))
    found = data["found"]
    assert isinstance(found, dict)
    assert "aiter_ext" not in found
    assert data["loaded"] == []
