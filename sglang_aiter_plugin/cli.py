"""Command line: ``sglang-aiter-plugin doctor [--json] [--attention-backend NAME]``,
``sglang-aiter-plugin selftest [--device DEV] [--only CASE] [--json] ... [sglang server
arguments]`` and ``sglang-aiter-plugin ledger``."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    try:
        from sglang_aiter_plugin._releases import __version__ as version
    except Exception as exc:  # a broken install: doctor says more
        version = f"unknown ({type(exc).__name__})"
    parser = argparse.ArgumentParser(prog="sglang-aiter-plugin", description=(
        "sglang-aiter-plugin: the aiter-ext attention backend for sglang on ROCm"))
    parser.add_argument("--version", action="version", version=version)
    sub = parser.add_subparsers(dest="command", required=True)
    doctor = sub.add_parser("doctor", help="check sglang, the platform, discovery and each fix")
    doctor.add_argument("--json", action="store_true", help="machine-readable output")
    doctor.add_argument("--attention-backend", metavar="NAME", help=(
        "the backend you will launch with; with aiter-ext, a missing aiter is an error"))
    selftest = sub.add_parser("selftest", allow_abbrev=False, help=(
        "run aiter-ext and upstream aiter on this GPU, case by case, against a torch reference "
        "(run it on a GPU that is not serving)"), description=(
        "Any other arguments are sglang server arguments, parsed by sglang's own parser: the "
        "cases are then those that configuration takes on one rank of it (--model-path: a local "
        "folder with the model's config.json, no weights; --kv-cache-dtype, --page-size, "
        "--tp-size, --dp-size/--enable-dp-attention or --attn-dp-size, --speculative-*, the "
        "CUDA-graph sizes, --max-running-requests). Without them, the self-test's own cases."))
    selftest.add_argument("--device", default="cuda", help=(
        "the GPU to use: cuda or cuda:N (torch's names; HIP devices are called cuda too), made "
        "the current device in every worker process (default: cuda). cpu is for the plugin's own "
        "tests only: it runs with their test doubles, and the eager and metadata cases only"))
    selftest.add_argument("--only", metavar="CASE", action="append", default=[], help=(
        "run only this case (repeatable); --list shows the cases"))
    selftest.add_argument("--list", action="store_true", help=(
        "list the cases (those of the sglang arguments given, and why each) and exit"))
    selftest.add_argument("--json", action="store_true", help="machine-readable output")
    selftest.add_argument("--upstream-unsafe", action="store_true", help=(
        "also run upstream's batches that its buffers cannot hold (they read or write past them: "
        "a memory fault or corruption in that worker process, which a fresh one replaces)"))
    selftest.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS",
                          help="per case, and for a worker to import sglang (default: 300)")
    selftest.add_argument("--jobs", type=int, default=2, help=(
        "worker processes at a time (default: 2, one per backend; more share each backend's "
        "cases)"))
    selftest.add_argument("--isolate", action="store_true", help=(
        "run every case in a worker process of its own (each imports sglang anew)"))
    selftest.add_argument("--max-gpu-memory", type=int, default=4096, metavar="MIB", help=(
        "GPU memory each worker may allocate through torch (default: 4096)"))
    sub.add_parser("ledger", help=(
        "print the ledger: every upstream defect the plugin answers, the sglang symbols it "
        "touches, why, how, upstream's pull requests and when it steps aside (Markdown)"))
    args, rest = parser.parse_known_args(argv)
    if args.command == "selftest":
        return _selftest(args, tuple(rest))
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.command == "ledger":
        from sglang_aiter_plugin._ledger import markdown
        from sglang_aiter_plugin.fixes import ledger_sections

        print(markdown(ledger_sections()), end="")
        return 0

    try:
        from sglang_aiter_plugin import _doctor
    except Exception as exc:  # the one check left: the doctor itself does not import
        summary = f"sglang_aiter_plugin._doctor does not import: {type(exc).__name__}: {exc}"
        check = {"name": "doctor", "level": "FAIL", "summary": summary}
        print(json.dumps({"ok": False, "checks": [check]}, indent=2) if args.json
              else f"FAIL  doctor  {summary}\n\ndoctor: problems found")
        return 1
    report = _doctor.collect(selected_backend=args.attention_backend)
    print(_doctor.render_json(report) if args.json else _doctor.render_table(report))
    return report.exit_code


def _selftest(args: argparse.Namespace, sglang_args: tuple[str, ...]) -> int:
    from sglang_aiter_plugin.selftest import report
    from sglang_aiter_plugin.selftest.cases import CASES, Case, UnknownCaseError, by_name
    from sglang_aiter_plugin.selftest.run import Options, device_problem, selftest

    def refuse(problem: object) -> int:
        print(f"sglang-aiter-plugin selftest: {problem}", file=sys.stderr)
        return 2

    if (problem := device_problem(args.device)) is not None:
        return refuse(problem)
    planned: tuple[Case, ...] = CASES
    notes: tuple[str, ...] = ()
    if sglang_args:
        from sglang_aiter_plugin.selftest.deployment import DeploymentArgsError, plan
        from sglang_aiter_plugin.selftest.sglang_setup import SglangMissingError

        try:
            deployment = plan(sglang_args, args.device)
        except (DeploymentArgsError, SglangMissingError) as exc:
            return refuse(exc)
        planned, notes = deployment.cases, deployment.notes
    if args.list:
        width = max(len(c.name) for c in planned) + 2
        for case in planned:
            print(f"{case.name:<{max(24, width)}}{case.describe()}")
        for note in notes:
            print(f"note: {note}")
        return 0
    try:
        cases = by_name(args.only, planned) if args.only else list(planned)
    except UnknownCaseError as exc:
        return refuse(exc)
    if args.jobs < 1 or args.timeout <= 0 or args.max_gpu_memory < 1:
        return refuse("--jobs, --timeout and --max-gpu-memory must be positive")
    for note in notes:
        print(f"sglang-aiter-plugin selftest: {note}", file=sys.stderr)
    run = selftest(Options(device=args.device, only=tuple(args.only),
                           unsafe=args.upstream_unsafe, timeout=args.timeout, jobs=args.jobs,
                           gpu_mib=args.max_gpu_memory, isolate=args.isolate,
                           sglang_args=sglang_args),
                   on_case=_progress(len(cases)), planned=planned)
    print(report.as_json(run) if args.json else report.as_text(run))
    return run.exit_code


def _progress(total: int) -> Callable[[Any], None]:
    """One line on stderr per case as it ends."""
    from sglang_aiter_plugin.selftest.report import progress_line

    done = 0

    def show(row: Any) -> None:
        nonlocal done
        done += 1
        print(progress_line(row, done, total), file=sys.stderr, flush=True)

    return show


if __name__ == "__main__":
    sys.exit(main())
