"""Bytes of every CUDA-graph buffer: ``aiter-ext`` against upstream ``aiter``, per release.

Both backends are built on the CPU with sglang's real code and configuration (sglang's parser,
a config-only Llama-3-8B-shaped model directory with an 8192-token context, real request and KV
pools of P requests) and ``init_cuda_graph_state`` runs at sglang's own largest captured batch
(``get_batch_sizes_to_capture``). Every tensor the backend object (and, for EAGLE, the multi-step
draft wrapper) holds afterwards is listed with its bytes, and the buffers whose size differs are
reported. Deterministic: no timing.

    .venv/bin/python -m benchmarks.graph_buffer_bytes                 # 0.5.12 0.5.13 0.5.23
    .venv/bin/python -m benchmarks.graph_buffer_bytes 0.5.11 0.5.23
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
REPO = ROOT.parent
DEFAULT = ["0.5.12", "0.5.13", "0.5.23"]
POOL = 256
DRAFT = ("--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3",
         "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4")
CASES = (
    ("decode (ragged)", 1, "0", ()),
    ("decode (ragged)", 16, "0", ()),
    ("decode (unified)", 1, "1", ()),
    ("decode (unified)", 16, "1", ()),
    ("EAGLE target (ragged)", 16, "0", DRAFT),
)


def _tensors(obj: Any, prefix: str = "") -> dict[str, int]:
    import torch

    out = {}
    for name, value in vars(obj).items():
        if isinstance(value, torch.Tensor):
            out[prefix + name] = value.numel() * value.element_size()
    return out


def measure() -> list[dict[str, Any]]:
    from sglang.srt.layers.attention import aiter_backend

    from benchmarks.pool_capacity import LLAMA_8B
    from testkit.batch_paths import SCENARIOS, graph_max
    from testkit.doubles import aiter_backend_imports
    from testkit.sglang_setup import configure

    aiter_backend_imports.install(aiter_backend)
    model = Path(tempfile.mkdtemp()) / "llama-8b-shape"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(LLAMA_8B))
    rows = []
    for label, page, unified, extra in CASES:
        flags = ["--page-size", str(page), *extra]
        if extra:
            flags += ["--speculative-draft-model-path", str(model)]
        os.environ["SGLANG_USE_AITER_UNIFIED_ATTN"] = unified
        setup = configure(model, SCENARIOS["plain"], tuple(flags), pool=POOL)
        with setup.scope:
            bs = graph_max(setup)
            sizes = {}
            for kind in ("upstream", "aiter-ext"):
                if kind == "aiter-ext":
                    from sglang_aiter_plugin.backend.classes import AiterExtAttnBackend as cls
                else:
                    cls = aiter_backend.AiterAttnBackend
                backend = cls(setup.runner)
                tokens = bs * int(backend.num_draft_tokens or 1)
                backend.init_cuda_graph_state(bs, tokens)
                sizes[kind] = _tensors(backend)
                del backend
            names = sorted(set(sizes["upstream"]) | set(sizes["aiter-ext"]))
            changed = {n: [sizes["upstream"].get(n, 0), sizes["aiter-ext"].get(n, 0)]
                       for n in names if sizes["upstream"].get(n) != sizes["aiter-ext"].get(n)}
            rows.append(dict(case=label, page=page, max_bs=bs,
                             context=int(setup.runner.model_config.context_len),
                             upstream=sum(sizes["upstream"].values()),
                             aiter_ext=sum(sizes["aiter-ext"].values()), changed=changed))
    os.environ.pop("SGLANG_USE_AITER_UNIFIED_ATTN", None)
    return rows


CODE = """
import sys, json
sys.modules.setdefault('aiter', None)
from benchmarks.graph_buffer_bytes import measure
print('RESULT ' + json.dumps(measure()))
"""


def _run(version: str) -> list[dict[str, Any]]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for name in ("SGLANG_USE_AITER_UNIFIED_ATTN", "SGLANG_AITER_EXT_BOUNDS_CHECK"):
        env.pop(name, None)
    proc = subprocess.run(["bash", str(REPO / "tools" / "with-sglang"), version, sys.executable,
                           "-c", CODE], cwd=REPO, capture_output=True, text=True, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"sglang {version}: exit {proc.returncode}\n{proc.stderr[-4000:]}")
    data: list[dict[str, Any]] = json.loads(lines[-1][len("RESULT "):])
    return data


def _mib(n: int) -> str:
    return f"{n / 2**20:.3f} MiB"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("releases", nargs="*", default=DEFAULT)
    args = parser.parse_args(argv)
    command = "python -m benchmarks.graph_buffer_bytes " + " ".join(args.releases)
    results = {v: _run(v) for v in args.releases}
    out = ROOT / "results" / "graph_buffers" / "bytes.json"  # not a RESULTS.md section (yet)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"benchmark": "graph_buffer_bytes", "command": command,
                               "date": dt.date.today().isoformat(), "results": results},
                              indent=1) + "\n")
    print(f"# {command} ({dt.date.today().isoformat()}); Llama-3-8B-shaped, P = {POOL}")
    print("| sglang | case | page | max_bs | upstream | aiter-ext | extra | changed buffers |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for version, rows in results.items():
        for r in rows:
            changed = "; ".join(f"{n} {_mib(a)} -> {_mib(b)}" for n, (a, b) in
                                r["changed"].items()) or "none"
            print(f"| {version} | {r['case']} | {r['page']} | {r['max_bs']} | "
                  f"{_mib(r['upstream'])} | {_mib(r['aiter_ext'])} | "
                  f"{_mib(r['aiter_ext'] - r['upstream'])} | {changed} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
