"""Run Python in a fresh interpreter, as sglang starts its processes, and read back JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["PRELUDE", "Result", "run_main_script", "run_python"]

PRELUDE = 'import sys, json\nsys.modules.setdefault("aiter", None)\n'


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str

    @property
    def data(self) -> Any:
        lines = [ln for ln in self.stdout.splitlines() if ln.startswith("RESULT ")]
        assert lines, f"no RESULT line\nstdout:\n{self.stdout}\nstderr:\n{self.stderr[-4000:]}"
        return json.loads(lines[-1][len("RESULT ") :])


def run_python(code: str, env: dict[str, str] | None = None, timeout: int = 600) -> Result:
    """Run ``code`` (which prints ``RESULT <json>``) with this interpreter and ``env`` overrides."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_AITER_EXT",))}
    full_env.pop("SGLANG_PLUGINS", None)
    full_env.pop("SGLANG_PLATFORM", None)
    full_env.update(env or {})
    proc = subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


def run_main_script(directory: Path, code: str, env: dict[str, str] | None = None) -> Result:
    """Run ``code`` as ``__main__`` from a file: ``spawn`` children re-import the main module."""
    script = directory / "main_script.py"
    script.write_text(PRELUDE + textwrap.dedent(code))
    return run_python(f"import runpy; runpy.run_path({str(script)!r}, run_name='__main__')", env)
