"""A self-test worker: ``python -m sglang_aiter_plugin.selftest.child DEVICE``.

It runs sglang's own plugin loader, as every sglang process does (sglang is imported once, here),
makes ``DEVICE`` its current GPU, and prints :data:`MARK` followed by what this host is as JSON
(versions, the GPU, whether ``aiter-ext`` can run: the backend's own host checks). Then it reads
one case per line on stdin, ``{"case": NAME, "kind": KIND, "sglang_args": [...], "unsafe": bool,
"gpu_mib": N, "env": {...}}``, runs it for that backend with those settings (the case named among
the self-test's own, or among those the operator's sglang arguments plan, :mod:`.deployment`),
and prints :data:`MARK` followed by its result as JSON; it ends at the end of its input. The
parent (:mod:`.run`) gives each case a time limit and replaces a worker that faulted or ran past
it.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["MARK", "main", "use_device"]

MARK = "SELFTEST-RESULT "


def main(argv: Sequence[str]) -> int:
    device = argv[0]
    loaded = _load_plugins()
    use_device(device)
    print(MARK + json.dumps(_probe(device, loaded)), flush=True)
    for line in sys.stdin:
        if line.strip():
            print(MARK + json.dumps(_case(json.loads(line), device)), flush=True)
    return 0


def use_device(device: str) -> None:
    """Make ``device`` (``cuda:N``) this process's current GPU, so that graphs capture and
    kernels launch where the tensors are; ``cuda`` and ``cpu`` change nothing."""
    if device.startswith("cuda:"):
        import torch

        index = torch.device(device).index
        if torch.cuda.is_available() and index is not None and index < torch.cuda.device_count():
            torch.cuda.set_device(index)


def _load_plugins() -> str | None:
    """Run sglang's plugin loader; ``None``, or why it failed."""
    try:
        from sglang.srt.plugins import load_plugins

        load_plugins()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def _case(spec: dict[str, Any], device: str) -> dict[str, Any]:
    """One case for one backend, with the settings it names in the environment meanwhile."""
    from sglang_aiter_plugin.selftest.cases import CASES, by_name
    from sglang_aiter_plugin.selftest.checks import gpu_memory_bound, peak_gpu_mib, run

    planned = CASES
    if spec.get("sglang_args"):
        from sglang_aiter_plugin.selftest.deployment import plan

        planned = plan(spec["sglang_args"], device).cases
    (case,) = by_name([spec["case"]], planned)
    before = {name: os.environ.get(name) for name in spec["env"]}
    os.environ.update(spec["env"])
    try:
        with gpu_memory_bound(device, int(spec["gpu_mib"])):
            result = run(case, spec["kind"], device, bool(spec["unsafe"]))
        result.peak_gpu_mib = peak_gpu_mib(device)
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return result.as_dict()


def _probe(device: str, plugin_load_error: str | None) -> dict[str, Any]:
    """Versions, the GPU, and why ``aiter-ext`` cannot run here (``problem``, else ``None``)."""
    import platform

    import torch

    from sglang_aiter_plugin._releases import __version__
    from sglang_aiter_plugin._sglang import installed_sglang_version
    from sglang_aiter_plugin.backend import aiter_problem

    facts: dict[str, Any] = {
        "plugin": __version__,
        "sglang": str(installed_sglang_version()),
        "torch": torch.__version__,
        "hip": getattr(torch.version, "hip", None),
        "cuda": getattr(torch.version, "cuda", None),
        "python": platform.python_version(),
        "aiter": _aiter_version(),
        "gpu": None,
        "arch": None,
        "plugin_load_error": plugin_load_error,
    }
    problem = aiter_problem()
    if device != "cpu":
        if not torch.cuda.is_available():
            problem = problem or f"torch sees no GPU (torch {torch.__version__})"
        else:
            index = torch.device(device).index or 0
            if index >= torch.cuda.device_count():
                problem = problem or (f"--device {device}: this host has "
                                      f"{torch.cuda.device_count()} GPU(s)")
            else:
                props = torch.cuda.get_device_properties(index)
                facts["gpu"] = props.name
                facts["arch"] = (getattr(props, "gcnArchName", None)
                                 or f"sm_{props.major}{props.minor}")
    facts["problem"] = problem
    facts["aiter_from"] = _aiter_origin()
    return facts


def _aiter_origin() -> str | None:
    """Where the ``aiter`` this process imported comes from: its file, else its docstring's first
    line (a package put in ``sys.modules`` by another plugin says what it is there)."""
    imported = sys.modules.get("aiter")
    if imported is None:
        return None
    where = getattr(imported, "__file__", None)
    if where:
        return str(where)
    lines = (imported.__doc__ or "").strip().splitlines()
    return lines[0] if lines else repr(imported)


def _aiter_version() -> str | None:
    """aiter's distribution version and, where it runs from a git checkout, the commit."""
    import importlib.util
    import subprocess
    from importlib.metadata import PackageNotFoundError, version
    from pathlib import Path

    found = None
    for dist in ("amd-aiter", "aiter"):
        try:
            found = version(dist)
            break
        except PackageNotFoundError:
            continue
    try:
        spec = importlib.util.find_spec("aiter")
    except (ImportError, ValueError):
        spec = None
    origin = getattr(spec, "origin", None)
    if origin:
        try:
            commit = subprocess.run(
                ["git", "-C", str(Path(origin).parent), "rev-parse", "--short=12", "HEAD"],
                capture_output=True, text=True, timeout=10, check=False).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            commit = ""
        if commit:
            found = f"{found or 'unknown version'} (commit {commit})"
    return found


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
