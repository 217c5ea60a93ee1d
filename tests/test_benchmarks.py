"""The benchmark renderer turns every committed result into its section (no timing here)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def _render(results: Path, out: Path) -> subprocess.CompletedProcess[str]:
    """``python -m benchmarks.render`` as a maintainer runs it, from the repository root."""
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.render", "--results", str(results), "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )


def test_every_committed_result_renders_with_its_numbers(tmp_path: Path) -> None:
    out = tmp_path / "RESULTS.md"
    proc = _render(RESULTS, out)
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    for path in sorted(RESULTS.glob("*.json")):
        data = json.loads(path.read_text())
        assert data["command"] in text, f"{path.name} is not rendered"
        if data["benchmark"] == "backend_gpu":
            for p in data["paths"].values():
                assert f"**{p['capture_ratio']:.3f}**" in text
        if data["benchmark"] == "bounds_check":
            for rows in data["paths"].values():
                for r in rows.values():
                    assert f"**{r['ratio_cpu']:.3f}**" in text
        if data["benchmark"] == "pool_capacity":
            for row in data["rows"]:
                assert f"**{row['extra_bytes_no_graphs']:,} B" in text
        if data["benchmark"] == "page_table_fill_gpu":
            for m in data["metadata"].values():
                assert f"**{m['replay']['ratio_gpu']:.3f}**" in text
        if data["benchmark"] == "collectives_overhead":
            for r in data["methods"].values():
                assert f"**{r['ratio_wrapped_vs_do_nothing_hook']:.3f}**" in text
        if data["benchmark"] == "startup_rocm":
            for key, r in data["ratio"].items():
                assert f"**{r['median']:.2f}x**" in text, key
            pluggy = data["steps"]["import pluggy"]["ms"]["median"]
            assert f"importing pluggy, the registry, alone takes {pluggy:.2f} ms" in text


def test_unknown_result_kinds_are_skipped_not_invented(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    shutil.copy(RESULTS / "startup.json", results)
    (results / "odd.json").write_text(json.dumps({"benchmark": "nobody-knows", "command": "x"}))
    out = tmp_path / "RESULTS.md"
    proc = _render(results, out)
    text = out.read_text()
    assert "## Start-up cost on CPU" in text
    assert "nobody-knows" not in text
    assert "skipping odd.json: unknown benchmark kind" in proc.stderr


def test_the_page_table_fill_result_renders_its_ratios_and_the_fills_status(
        tmp_path: Path) -> None:
    """A result of ``benchmarks/page_table_fill_gpu.py`` (its numbers made up here: the shape the
    script writes, from ``backend_gpu.json``'s unified replay timings)."""
    source = json.loads((RESULTS / "backend_gpu.json").read_text())
    unified = source["paths"]["unified"]["metadata"]
    data = {**{k: source[k] for k in ("date", "machine", "python", "torch", "sglang", "gpu",
                                      "triton", "pool", "capture_bs", "max_bs", "rounds")},
            "benchmark": "page_table_fill_gpu", "page_size": 1, "path": "unified",
            "command": "python3 -m benchmarks.page_table_fill_gpu",
            "fill_status": "unified-page-table=applied (the page table is filled after upstream's "
                           "graph metadata)",
            "metadata": {n: {"graph_bs": m["graph_bs"], "replay": m["replay"]}
                         for n, m in unified.items()}}
    results = tmp_path / "results"
    results.mkdir()
    (results / "page_table_fill_gpu.json").write_text(json.dumps(data))
    out = tmp_path / "RESULTS.md"
    proc = _render(results, out)
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert "`unified-page-table=applied (the page table is filled" in text
    for m in unified.values():
        assert f"**{m['replay']['ratio_gpu']:.3f}** | {m['replay']['noise_gpu']:.3f} |" in text
