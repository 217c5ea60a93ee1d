"""A real `sglang serve ... --attention-backend aiter-ext` on this GPU-less machine.

sglang must accept the name, the plugin's log line must appear, and the process must end with
the plugin's own message or, on a host without an accelerator, with sglang's first platform error
after that line; never `invalid choice`.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

# The ports sglang derives from the base port: the next few (tokenizer, scheduler, detokenizer,
# NCCL), base + 233 onwards (ZMQ over TCP) and base + 10000 (gRPC, which must stay <= 65535).
DERIVED_OFFSETS = (*range(0, 8), *range(233, 241), 10000)


def _free_base_port() -> int:
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(20000, 50000)
        if all(_is_free(p) for p in _ports(base)):
            return base
    raise RuntimeError("no free port range for the launch test")


def _ports(base: int) -> list[int]:
    return [base + offset for offset in DERIVED_OFFSETS]


def _is_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _wait_ports_free(base: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        busy = [p for p in _ports(base) if not _is_free(p)]
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


def _serve(model: Path, backend: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("sglang", path=os.path.dirname(sys.executable))
    assert exe, "sglang's console script is installed in the environment"
    base = _free_base_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_")}
    env.setdefault("PYTHONUNBUFFERED", "1")
    try:
        return subprocess.run(
            [exe, "serve", "--model-path", str(model), "--attention-backend", backend,
             "--port", str(base), "--skip-tokenizer-init"],
            capture_output=True, text=True, env=env, timeout=600,
        )
    finally:
        _wait_ports_free(base)


def test_serve_with_aiter_ext_gets_past_parsing_and_logs_the_plugin(tiny_llama: Path) -> None:
    proc = _serve(tiny_llama, "aiter-ext")
    out = proc.stdout + proc.stderr
    assert "invalid choice" not in out
    assert proc.returncode != 0  # no accelerator and no ROCm here: it must stop, loudly
    lines = out.splitlines()
    plugin_line = next(i for i, ln in enumerate(lines) if "sglang-aiter-plugin 0" in ln)
    line = lines[plugin_line]
    # `sglang serve` loads plugins before it imports the backend registry: the fix says so
    assert ("attention-backend=applied (" in line) or (
        "attention-backend=pending (" in line
        and "when sglang imports sglang.srt.layers.attention.attention_registry" in line
    ), line
    # the first error after the plugin's line: the plugin's own message, or sglang's device error
    errors = [ln for ln in lines[plugin_line + 1 :] if ln.startswith(("RuntimeError", "sglang_"))
              or "AiterUnavailableError" in ln]
    assert errors, out[-3000:]
    first = errors[0]
    assert ("aiter-ext cannot run here" in first) or (
        "No accelerator (CUDA, XPU, HPU, NPU, MUSA, MPS) or platform plugin is available" in first
    ), first


def test_unknown_backend_is_still_rejected_by_the_parser(tiny_llama: Path) -> None:
    proc = _serve(tiny_llama, "aiter-extra")
    assert proc.returncode == 2
    assert "invalid choice: 'aiter-extra'" in proc.stderr
