"""RESULTS.md section and plot for ``benchmarks/backend_gpu.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks._format import fmt, header

__all__ = ["backend_gpu", "bounds_check", "server_gpu"]


def backend_gpu(data: dict[str, Any], out_dir: Path) -> list[str]:
    lines = [f"## aiter vs aiter-ext on {data['gpu']}: per-step metadata, memory, capture", "",
             *header(data),
             f"Two-batch overlap, request pool P = {data['pool']}, captured graph sizes "
             f"{data['capture_bs']} (max_bs {data['max_bs']} > P). {data['rounds']} interleaved "
             "rounds per point after 20 warm-up rounds; medians. *n* real requests run in the "
             "smallest captured graph that holds them. Noise: `aiter` timed twice.", ""]
    for path, p in data["paths"].items():
        lines += [f"### {path} decode", "",
                  "| n (graph bs) | replay GPU µs aiter / aiter-ext | ratio | noise | "
                  "replay CPU µs aiter / aiter-ext | ratio | noise | capture-time metadata "
                  "ratio GPU / CPU |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for n, m in p["metadata"].items():
            r, c = m["replay"], m["capture"]
            g, u = r["gpu_us"], r["cpu_us"]
            lines.append(
                f"| {n} ({m['graph_bs']}) | {g['aiter']['median']:.1f} / "
                f"{g['aiter-ext']['median']:.1f} | **{r['ratio_gpu']:.3f}** | "
                f"{r['noise_gpu']:.3f} | {u['aiter']['median']:.1f} / "
                f"{u['aiter-ext']['median']:.1f} | **{r['ratio_cpu']:.3f}** | "
                f"{r['noise_cpu']:.3f} | {c['ratio_gpu']:.3f} / {c['ratio_cpu']:.3f} |")
        need = ", ".join(f"{k} {v:,} B" for k, v in p["extra_bytes_needed_by_buffer"].items())
        cap = p["capture_all_s"]
        lines += [
            "",
            f"- Device bytes the padded rows need (the pool's buffers minus upstream's, tensor by "
            f"tensor): **{p['extra_bytes_needed']:,} B** ({need}). Measured through "
            f"`torch.cuda.memory_allocated()` after building each backend: "
            f"{p['extra_bytes_measured']:+,} B (aiter {p['held_bytes']['aiter']:,} B, aiter-ext "
            f"{p['held_bytes']['aiter-ext']:,} B); that figure includes the caching "
            "allocator's block rounding, so it is only a bound of the order of kilobytes.",
            f"- Capturing the decode graphs at all {len(data['capture_bs'])} sizes: aiter "
            f"{', '.join(f'{s * 1000:.2f}' for s in cap['aiter'])} ms, aiter-ext "
            f"{', '.join(f'{s * 1000:.2f}' for s in cap['aiter-ext'])} ms; ratio of medians "
            f"**{p['capture_ratio']:.3f}**.",
            "",
        ]
    plot = _plot(data, out_dir)
    if plot:
        lines += [f"![replay metadata ratio vs batch size]({plot})", ""]
    return lines


def _plot(data: dict[str, Any], out_dir: Path) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    labels: list[str] = []
    for path, p in data["paths"].items():
        labels = [f"{n} ({m['graph_bs']})" for n, m in p["metadata"].items()]
        bs = list(range(len(labels)))
        for clock, style in (("gpu", "-o"), ("cpu", "--s")):
            ax.plot(bs, [m["replay"][f"ratio_{clock}"] for m in p["metadata"].values()], style,
                    label=f"{path}, {clock.upper()} time")
        ax.fill_between(bs, [m["replay"]["noise_gpu"] for m in p["metadata"].values()], 1.0,
                        alpha=0.1)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.axhline(1.05, color="red", lw=0.8, ls=":")
    ax.set_xticks(range(len(labels)), labels)
    ax.set_xlabel("real requests (captured graph batch size)")
    ax.set_ylabel("aiter-ext / aiter")
    ax.set_title("init_forward_metadata (replay), median of interleaved rounds")
    ax.legend(fontsize=7)
    fig.tight_layout()
    name = "backend_gpu_ratio.png"
    fig.savefig(out_dir / name, dpi=120)
    plt.close(fig)
    return name


def bounds_check(data: dict[str, Any], _: Path) -> list[str]:
    lines = [f"## SGLANG_AITER_EXT_BOUNDS_CHECK on {data['gpu']}: per-step metadata cost", "",
             *header(data),
             f"Two `aiter-ext` backends, one built with the check, same configuration as above "
             f"(P = {data['pool']}, max_bs {data['max_bs']}). {data['rounds']} interleaved rounds "
             "per point after 20 warm-up rounds; medians. Noise: the plain backend timed twice.",
             ""]
    for path, rows in data["paths"].items():
        lines += [f"### {path} decode", "",
                  "| n (graph bs) | CPU µs plain / checked | ratio | noise | Δ µs | "
                  "GPU µs plain / checked | ratio | noise |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for n, r in rows.items():
            c, g = r["cpu_us"], r["gpu_us"]
            lines.append(
                f"| {n} ({r['graph_bs']}) | {c['plain']['median']:.1f} / "
                f"{c['checked']['median']:.1f} | **{r['ratio_cpu']:.3f}** | {r['noise_cpu']:.3f} "
                f"| {r['delta_cpu_us']:+.2f} | {g['plain']['median']:.1f} / "
                f"{g['checked']['median']:.1f} | **{r['ratio_gpu']:.3f}** | {r['noise_gpu']:.3f} |")
        lines.append("")
    return lines


def server_gpu(data: dict[str, Any], _: Path) -> list[str]:
    lines = ["## Real servers on a GPU: `aiter-ext` against `aiter` with decode CUDA graphs", "",
             *header(data)]
    lines += [f"Three servers (pool {data['pool']}, decode graphs up to {data['graph_max_bs']}), "
              f"{data['rounds']} rounds of {data['prompts']} prompts x {data['new_tokens']} "
              "greedy tokens each, one server busy at a time, order rotated per round.", "",
              "| server | start-up to ready | decode throughput |", "| --- | --- | --- |"]
    for label, s in data["tokens_per_s"].items():
        lines.append(f"| {label} | {data['ready_s'][label]:.1f} s | {fmt(s, 'tokens/s')} |")
    lines += ["",
              f"- Decode throughput, `aiter-ext / aiter`: **{data['throughput_ratio']:.3f}** "
              f"(noise, `aiter` against itself: {data['throughput_noise']:.3f}).",
              *([f"- The same ratio round by round (each round's `aiter-ext` over its `aiter`): "
                 f"**{fmt(data['paired_ratio'], '', 3).replace('  ', ' ')}**; noise "
                 f"{fmt(data['paired_noise'], '', 3).replace('  ', ' ')}."]
                if "paired_ratio" in data else []),
              f"- Start-up to ready, `aiter-ext / aiter`: **{data['ready_ratio']:.3f}** "
              f"(noise: {data['ready_noise']:.3f}; one start each).", ""]
    return lines


def page_table_fill_gpu(data: dict[str, Any], _: Path) -> list[str]:
    """The unified page-1 fill's cost per replay (``benchmarks/page_table_fill_gpu.py``)."""
    lines = [f"## The unified page-1 page-table fill on {data['gpu']}: cost per replay", "",
             *header(data),
             f"`SGLANG_USE_AITER_UNIFIED_ATTN=1`, page size {data['page_size']}, two-batch "
             f"overlap, request pool P = {data['pool']}, captured graph sizes "
             f"{data['capture_bs']}. {data['rounds']} interleaved rounds per point after 20 "
             "warm-up rounds; medians. aiter-ext's graph set-up reported: "
             f"`{data['fill_status']}`. Noise: `aiter` timed twice.", "",
             "| n (graph bs) | replay GPU µs aiter / aiter-ext | ratio | noise | "
             "replay CPU µs aiter / aiter-ext | ratio | noise |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for n, m in data["metadata"].items():
        r = m["replay"]
        g, u = r["gpu_us"], r["cpu_us"]
        lines.append(
            f"| {n} ({m['graph_bs']}) | {g['aiter']['median']:.1f} / "
            f"{g['aiter-ext']['median']:.1f} | **{r['ratio_gpu']:.3f}** | "
            f"{r['noise_gpu']:.3f} | {u['aiter']['median']:.1f} / "
            f"{u['aiter-ext']['median']:.1f} | **{r['ratio_cpu']:.3f}** | {r['noise_cpu']:.3f} |")
    return [*lines, ""]


def mla_eager_gpu(data: dict[str, Any], _: Path) -> list[str]:
    """What holding the MLA split tables costs an eager decode step
    (``benchmarks/mla_eager_gpu.py``)."""
    lines = [f"## An eager MLA decode step on {data['gpu']}: `mla-split-table`'s cost", "",
             *header(data),
             "One layer's eager decode (`init_forward_metadata` + `forward_decode`) through "
             f"aiter's own `mla.py` ({data['aiter']}; its cache and Triton stage 2, a torch "
             "stage 1), "
             f"{data['heads']} heads, bf16 KV, {data['length']} tokens a request, after both "
             f"backends' graph set-up. {data['rounds']} interleaved rounds after 20 warm-up "
             f"rounds; medians. aiter-ext's graph set-up reported: `{data['status']}`. A replay "
             "runs no Python, so this is the whole of the fix's per-step cost. Noise: `aiter` "
             "timed twice.", "",
             "| requests | CPU µs aiter / aiter-ext | ratio | noise | GPU µs aiter / aiter-ext "
             "| ratio | noise |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for n, r in data["per_n"].items():
        g, u = r["gpu_us"], r["cpu_us"]
        lines.append(
            f"| {n} | {u['aiter']['median']:.1f} / {u['aiter-ext']['median']:.1f} | "
            f"**{r['ratio_cpu']:.4f}** | {r['noise_cpu']:.4f} | {g['aiter']['median']:.1f} / "
            f"{g['aiter-ext']['median']:.1f} | **{r['ratio_gpu']:.4f}** | {r['noise_gpu']:.4f} |")
    return [*lines, ""]


def selftest_wall(data: dict[str, Any], _: Path) -> list[str]:
    """The self-test's wall time against one sglang import (``benchmarks/selftest_wall.py``)."""
    imp, st = data["import_s"], data["selftest_s"]
    lines = [f"## `sglang-aiter-plugin selftest` on {data['gpu']}: wall time", "",
             *header(data),
             "Side by side in one run: a fresh process that runs sglang's plugin loader and "
             "imports sglang's aiter backend module, and `python -m sglang_aiter_plugin selftest` "
             "with its default options (the kernel doubles as `gpu/run_selftest_evidence.sh` "
             f"installs them); {imp['n']} round(s), medians.", "",
             "| one import | the self-test | ratio | goal |", "| --- | --- | --- | --- |",
             f"| {imp['median']:.1f} s | {st['median']:.1f} s | **{data['ratio']:.2f}** | "
             f"at most {data['goal']} |"]
    return [*lines, ""]
