"""Real launches with ``aiter-ext`` on this machine, which has no ROCm (and no accelerator).

``sglang serve``, ``python -m sglang.launch_server`` and ``sglang.Engine(...)``: sglang must
accept the name, the plugin's log line must appear, and the launch must stop with the plugin's own
message -- what is missing and the way out -- as its final error, before any of sglang's device
detection (which would fail here with sglang's own "No accelerator" error); never
``invalid choice``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from testkit.server import _free_port, _port_free

pytestmark = pytest.mark.slow

# The ports sglang derives from the base port: the next few (tokenizer, scheduler, detokenizer,
# NCCL), base + 233 onwards (ZMQ over TCP) and base + 10000 (gRPC, which must stay <= 65535).
DERIVED_OFFSETS = (*range(0, 8), *range(233, 241), 10000)


def _ports(base: int) -> list[int]:
    return [base + offset for offset in DERIVED_OFFSETS]


def _wait_ports_free(base: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        busy = [p for p in _ports(base) if not _port_free(p)]
        if not busy:
            return
        time.sleep(0.5)
    warnings.warn(f"ports still busy after the launch test: {busy}", stacklevel=2)


@pytest.fixture
def tiny_llama(tmp_path: Path) -> Path:
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
        "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
        "num_hidden_layers": 2, "vocab_size": 1000, "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5, "torch_dtype": "bfloat16", "bos_token_id": 1, "eos_token_id": 2,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


ENGINE_DOES_NOT_IMPORT = 77
ENGINE = (
    "import sys; sys.modules.setdefault('aiter', None); import sglang as sgl\n"
    "try:\n    import sglang.srt.entrypoints.engine\n"
    "except Exception as exc:\n    print(f'{type(exc).__name__}: {exc}'); "
    f"sys.exit({ENGINE_DOES_NOT_IMPORT})\n"
    "sgl.Engine(model_path=sys.argv[1], attention_backend=sys.argv[2], port=int(sys.argv[3]), "
    "skip_tokenizer_init=True)"
)


def _launch(how: str, model: Path, backend: str) -> subprocess.CompletedProcess[str]:
    bindir = os.path.dirname(sys.executable)
    base = _free_port(DERIVED_OFFSETS)
    args = ["--model-path", str(model), "--attention-backend", backend, "--port", str(base),
            "--skip-tokenizer-init"]
    if how == "sglang serve":
        exe = shutil.which("sglang", path=bindir)
        assert exe, "sglang's console script is installed in the environment"
        cmd = [exe, "serve", *args]
    elif how == "launch_server":
        cmd = [sys.executable, "-m", "sglang.launch_server", *args]
    else:
        cmd = [sys.executable, "-c", ENGINE, str(model), backend, str(base)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_")}
    env.setdefault("PYTHONUNBUFFERED", "1")
    try:
        return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    finally:
        _wait_ports_free(base)


def _serve(model: Path, backend: str) -> subprocess.CompletedProcess[str]:
    return _launch("sglang serve", model, backend)


EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception): ")


@pytest.mark.parametrize("how", ["sglang serve", "launch_server", "Engine"])
def test_aiter_ext_without_rocm_stops_first_with_the_plugins_message(
    tiny_llama: Path, how: str
) -> None:
    proc = _launch(how, tiny_llama, "aiter-ext")
    if how == "Engine" and proc.returncode == ENGINE_DOES_NOT_IMPORT:
        # e.g. 0.5.11-0.5.12 import sgl_kernel there (GPU only)
        pytest.skip(f"sglang's Engine does not import on this CPU machine: {proc.stdout.strip()}")
    out = proc.stdout + proc.stderr
    assert "invalid choice" not in out
    assert proc.returncode != 0  # no ROCm here: it must stop, loudly
    lines = out.splitlines()
    plugin_line = next((ln for ln in lines if "sglang-aiter-plugin 0" in ln), None)
    assert plugin_line is not None, out[-3000:]
    assert ("attention-backend=applied (" in plugin_line) or (
        "attention-backend=pending (" in plugin_line
        and "when sglang imports sglang.srt.layers.attention.attention_registry" in plugin_line
    ), plugin_line
    errors = [ln for ln in lines if EXCEPTION_LINE.match(ln)]
    assert errors, out[-3000:]
    final = errors[-1]
    assert final.startswith("sglang_aiter_plugin.backend.AiterUnavailableError: "
                            "--attention-backend aiter-ext cannot run here: "), final
    assert "not a ROCm build" in final
    assert "sglang's ROCm image" in final
    assert "--attention-backend triton" in final
    assert "No accelerator" not in out  # sglang's device detection never ran


def test_unknown_backend_is_still_rejected_by_the_parser(tiny_llama: Path) -> None:
    proc = _serve(tiny_llama, "aiter-extra")
    assert proc.returncode == 2
    assert "invalid choice: 'aiter-extra'" in proc.stderr
