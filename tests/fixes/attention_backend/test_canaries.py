"""Canaries: a new sglang release that adds, moves or drops an ``"aiter"`` decision or an aiter
construction site fails here, loudly, instead of silently diverging.

The audits are pinned per release in ``tests/fixes/attention_backend/audit/<release>.txt``,
written by ``tools/audit_aiter_literals.py`` from the release's own source.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
from packaging.version import Version

from sglang_aiter_plugin import _releases
from sglang_aiter_plugin.fixes.attention_backend.fix import REGISTRY_MODULE
from sglang_aiter_plugin.fixes.attention_backend.sites import (
    AITER_BACKEND_MODULE,
    DRAFT_FACTORY_SITES,
    DRAFT_UTILS_MODULE,
)

ROOT = Path(__file__).resolve().parents[3]
AUDIT_DIR = Path(__file__).resolve().parent / "audit"


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "audit_aiter_literals", ROOT / "tools" / "audit_aiter_literals.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _package_dir() -> Path:
    spec = importlib.util.find_spec("sglang")
    assert spec is not None
    assert spec.submodule_search_locations
    return Path(next(iter(spec.submodule_search_locations)))


@pytest.fixture(scope="module")
def audit(sglang_version: object) -> list[str]:
    return list(_tool().audit(_package_dir()))


@pytest.fixture(scope="module")
def pinned(sglang_version: object) -> list[str]:
    path = AUDIT_DIR / f"{sglang_version}.txt"
    if not path.is_file():
        pytest.fail(
            f"no pinned aiter audit for sglang {sglang_version}: run "
            f"`python tools/audit_aiter_literals.py {_package_dir()} --write`, review every new "
            "or changed line (a new \"aiter\" test is covered by the fold; a new construction "
            "site needs its wrapper in sglang_aiter_plugin/fixes/attention_backend/sites.py), "
            "then commit it"
        )
    return path.read_text(encoding="utf-8").splitlines()


def test_every_supported_release_has_a_pinned_audit() -> None:
    releases = set(_releases.TESTED)
    assert releases <= {p.stem for p in AUDIT_DIR.glob("*.txt")}


def test_aiter_literals_match_the_pinned_audit(audit: list[str], pinned: list[str]) -> None:
    added = sorted(set(audit) - set(pinned))
    removed = sorted(set(pinned) - set(audit))
    assert (added, removed) == ([], []), (
        "sglang's \"aiter\" decisions changed in this release; review and re-pin with "
        "tools/audit_aiter_literals.py --write"
    )


def test_the_plugin_covers_every_construction_site(audit: list[str]) -> None:
    sites = set()
    for line in audit:
        if not line.startswith("construct "):
            continue
        _, where, qualname, _cls, binding = line.split()
        module = "sglang." + where.split(":")[0].removesuffix(".py").replace("/", ".")
        sites.add((module, qualname))
        # the plugin rebinds the names in aiter_backend; a copy imported elsewhere would escape
        same_module = module == "sglang.srt.layers.attention.aiter_backend"
        assert binding == "local-import" or same_module, line
    # every site the plugin wraps (the registry entry is sglang's create_aiter_backend), and
    # the draft wrapper's __init__, which the plugin's draft class runs as a copy
    factory_sites = {(DRAFT_UTILS_MODULE, f"DraftBackendFactory.{m}") for m in DRAFT_FACTORY_SITES}
    assert sites == {(REGISTRY_MODULE, "create_aiter_backend"),
                     (AITER_BACKEND_MODULE, "AiterMultiStepDraftBackend.__init__"), *factory_sites}


def test_the_fold_sits_at_the_first_resolution_step(
    plugins_loaded: None, sglang_version: object
) -> None:
    from sglang.srt.server_args import ServerArgs

    from sglang_aiter_plugin._patch import patched
    from sglang_aiter_plugin.fixes.attention_backend.choice import PATCH, fold_point

    resolve_once = Version(str(sglang_version)) >= Version("0.5.19")
    expected = "resolve_once" if resolve_once else "__post_init__"
    assert fold_point(ServerArgs) == expected
    assert patched(getattr(ServerArgs, expected), PATCH)


def _calls_load_plugins(path: Path, function: str) -> bool | None:
    if not path.is_file():
        return None
    tree = ast.parse(path.read_text(encoding="utf-8-sig"))
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == function:
            return any(
                isinstance(call, ast.Call)
                and getattr(call.func, "id", getattr(call.func, "attr", None)) == "load_plugins"
                for call in ast.walk(node)
            )
    return None


def test_schedulers_load_plugins_after_unpickling_the_record() -> None:
    path = _package_dir() / "srt" / "managers" / "scheduler.py"
    assert _calls_load_plugins(path, "run_scheduler_process") is True


def test_ray_scheduler_actors_still_do_not_load_plugins() -> None:
    """While they do not, aiter-ext with --use-ray is rejected; when they do, lift the guard."""
    path = _package_dir() / "srt" / "ray" / "scheduler_actor.py"
    if not path.is_file():
        pytest.skip("no Ray scheduler actor in this release")
    assert _calls_load_plugins(path, "SchedulerActor") is False
