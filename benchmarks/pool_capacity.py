"""Memory of the per-batch buffers: ``aiter-ext``'s pool at its capacity vs upstream ``aiter``.

``aiter-ext`` sizes its pool at construction for the largest batch sglang can send (the eager
MLP-sync maximum and the CUDA-graph maximum, from sglang's own rules); upstream sizes the same
buffers for the request pool P and regrows only its indptrs in ``init_cuda_graph_state``. Both
backends are built on the CPU with sglang's real code and configuration (sglang's parser, a
config-only model directory, real request and KV pools) and the bytes of every per-batch buffer
are added up, with graphs off (after construction) and on (after ``init_cuda_graph_state`` at
sglang's own largest captured batch). Deterministic: no timing.

    .venv/bin/python -m benchmarks.pool_capacity
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.modules.setdefault("aiter", None)  # type: ignore[arg-type]
ROOT = Path(__file__).resolve().parent

#: A Llama-3-8B-shaped attention (one layer: the buffers do not depend on depth).
LLAMA_8B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
    "head_dim": 128, "num_hidden_layers": 1, "max_position_embeddings": 8192,
    "vocab_size": 1024, "rms_norm_eps": 1e-5, "torch_dtype": "bfloat16",
}
SETTINGS = (
    ("dp-attention", 33), ("dp-attention", 257), ("dp-attention-tp4", 257),
    ("two-batch-overlap", 257), ("dp-attention", 256),
)


def _bytes(backend: Any, names: list[str]) -> int:
    total = 0
    for name in names:
        tensor = getattr(backend, name, None)
        if tensor is not None:
            total += tensor.numel() * tensor.element_size()
    return total


def measure(model_dir: Path, scenario: str, pool: int, path: str) -> dict[str, Any]:
    from sglang.srt.layers.attention.aiter_backend import AiterAttnBackend

    from sglang_aiter_plugin.backend.capacity import capacity_of
    from sglang_aiter_plugin.backend.classes import AiterExtAttnBackend
    from testkit.batch_paths import SCENARIOS, graph_max
    from testkit.sglang_setup import configure

    os.environ["SGLANG_USE_AITER_UNIFIED_ATTN"] = "1" if path == "unified" else "0"
    row: dict[str, Any] = {"configuration": scenario, "pool": pool, "path": path}
    for graphs in (False, True):
        setup = configure(model_dir, SCENARIOS[scenario], pool=pool)
        with setup.scope:
            ext = AiterExtAttnBackend(setup.runner)
            up = AiterAttnBackend(setup.runner)
            names = ext.buffer_pool.names()
            if graphs:
                top = graph_max(setup)
                ext.init_cuda_graph_state(top, top)
                up.init_cuda_graph_state(top, top)
                row["graph_max"] = top
            else:
                cap = capacity_of(setup.runner)
                row.update(capacity=cap.rows, eager_max=cap.eager, buffers=names)
            key = "graphs" if graphs else "no_graphs"
            row[f"aiter_ext_bytes_{key}"] = _bytes(ext, names)
            row[f"upstream_bytes_{key}"] = _bytes(up, names)
            row[f"extra_bytes_{key}"] = row[f"aiter_ext_bytes_{key}"] - row[f"upstream_bytes_{key}"]
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "pool_capacity.json")
    args = parser.parse_args(argv)
    import sglang

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "llama-8b-shaped"
        model_dir.mkdir()
        (model_dir / "config.json").write_text(json.dumps(LLAMA_8B))
        for scenario, pool in SETTINGS:
            for path in ("ragged", "unified"):
                rows.append(measure(model_dir, scenario, pool, path))
                print(json.dumps(rows[-1]), flush=True)
    data = {
        "benchmark": "pool_capacity",
        "command": "python -m benchmarks.pool_capacity",
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, CPU only (sizes, no timing)",
        "python": platform.python_version(),
        "sglang": sglang.__version__,
        "model": "Llama-3-8B-shaped attention (32 query heads, 8 KV heads, head dim 128, "
                 "context 8192, bf16), per attention-TP rank",
        "rows": rows,
    }
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
