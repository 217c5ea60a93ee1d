"""What ``selftest`` prints: a table with upstream's outcome beside ``aiter-ext``'s per case, a
summary line, a block to paste into a bug report, or the same as JSON (``--json``)."""

from __future__ import annotations

import json
from typing import Any

from sglang_aiter_plugin.selftest.cases import KINDS
from sglang_aiter_plugin.selftest.run import Row, Run

__all__ = ["as_json", "as_text", "progress_line"]

_LABEL = {"upstream": "upstream aiter", "aiter-ext": "aiter-ext"}


def host_line(host: dict[str, Any], device: str) -> str:
    """sglang, aiter, torch, HIP/CUDA, the GPU and its architecture, in one line."""
    if not host:
        return f"host: unknown (the probe did not answer); device {device}"
    runtime = (f"HIP {host['hip']}" if host.get("hip")
               else f"CUDA {host['cuda']}" if host.get("cuda") else "no GPU runtime")
    gpu = f"{host['gpu']} ({host['arch']})" if host.get("gpu") else "no GPU in use"
    aiter = host.get("aiter") or "no aiter distribution"
    if host.get("aiter_from"):
        aiter += f", imported from {host['aiter_from']}"
    return (f"sglang-aiter-plugin {host['plugin']}, sglang {host['sglang']}, aiter {aiter}, "
            f"torch {host['torch']} ({runtime}), Python {host['python']}, {gpu}, device {device}")


def _cell(outcome: dict[str, Any]) -> str:
    if outcome["outcome"] == "wrong" and outcome.get("max_err") is not None:
        return f"wrong (max |diff| {outcome['max_err']:.3g})"
    return str(outcome["outcome"])


def progress_line(row: Row, done: int, total: int) -> str:
    """The line printed on stderr as a case ends."""
    up, ext = (_cell(row.outcomes[k]) for k in KINDS)
    return (f"[{done}/{total}] {row.case.name}: {_LABEL['upstream']} {up}, "
            f"{_LABEL['aiter-ext']} {ext} ({row.seconds:.1f} s)")


def summary(run: Run) -> str:
    ext = [r.outcomes["aiter-ext"]["outcome"] for r in run.rows]
    ran = [o for o in ext if o not in ("skipped",)]
    passed = sum(o == "ok" for o in ext)
    counts: dict[str, int] = {}
    for r in run.rows:
        o = r.outcomes["upstream"]["outcome"]
        counts[o] = counts.get(o, 0) + 1
    upstream = ", ".join(f"{n} {o}" for o, n in sorted(counts.items()))
    verdict = {0: "PASS", 1: "FAIL", 2: "NOTHING RAN"}[run.exit_code]
    held = " (held back: run with --upstream-unsafe to run them)" if "held back" in counts else ""
    return (f"{verdict}: aiter-ext passed {passed} of {len(ran)} cases that ran "
            f"({len(ext) - len(ran)} skipped); upstream aiter: {upstream}{held}; "
            f"{run.seconds:.0f} s")


def as_text(run: Run) -> str:
    lines = [f"sglang-aiter-plugin selftest: {host_line(run.host, run.options.device)}", ""]
    if run.problem is not None:
        return "\n".join([*lines, f"nothing ran: {run.problem}"])
    width = max(len(r.case.name) for r in run.rows) + 2
    lines.append(f"{'case':<{width}}{_LABEL['upstream']:<28}{_LABEL['aiter-ext']:<28}time")
    for row in run.rows:
        up, ext = (_cell(row.outcomes[k]) for k in KINDS)
        lines.append(f"{row.case.name:<{width}}{up:<28}{ext:<28}{row.seconds:.1f} s")
        for kind in KINDS:
            lines.append(f"{'':<4}{_LABEL[kind]}: {row.outcomes[kind]['detail']}")
    peaks = [o["peak_gpu_mib"] for r in run.rows for o in r.outcomes.values()
             if o.get("peak_gpu_mib") is not None]
    if peaks:
        lines.append(f"peak GPU memory of one case: {max(peaks):.0f} MiB (bound "
                     f"{run.options.gpu_mib} MiB each worker, {run.options.jobs} at a time)")
    lines += ["", summary(run)]
    if run.nothing_ran:
        lines.append(run.nothing_ran)
    lines += ["", paste_block(run)]
    return "\n".join(lines)


def paste_block(run: Run) -> str:
    """The lines a bug report needs, between markers."""
    body = [host_line(run.host, run.options.device)]
    for row in run.rows:
        up, ext = (row.outcomes[k] for k in KINDS)
        body.append(f"{row.case.name}: upstream {_cell(up)}; aiter-ext {_cell(ext)}"
                    + (f" -- {ext['detail']}" if ext["outcome"] != "ok" else ""))
    body.append(summary(run))
    return "\n".join(["--- paste into a bug report ---", *body, "--- end ---"])


def as_json(run: Run) -> str:
    return json.dumps({
        "exit_code": run.exit_code,
        "summary": summary(run) if run.problem is None else None,
        "problem": run.nothing_ran,
        "host": run.host,
        "options": {"device": run.options.device, "upstream_unsafe": run.options.unsafe,
                    "timeout_s": run.options.timeout, "jobs": run.options.jobs,
                    "gpu_mib": run.options.gpu_mib,
                    **({"sglang_args": list(run.options.sglang_args)}
                       if run.options.sglang_args else {})},
        "seconds": round(run.seconds, 1),
        "cases": [{"case": r.case.name, "describes": r.case.describe(),
                   "seconds": round(r.seconds, 1), **{k: r.outcomes.get(k) for k in KINDS}}
                  for r in run.rows],
    }, indent=2)
