"""GPU tier of ``reduce-scatter-tms``: the hook inside a real ``torch.cuda.graph`` capture.

Every process loads the plugin through sglang's real ``load_plugins()`` (so the hook is the one
sglang's ``HookRegistry`` applied), builds a real ``GroupCoordinator`` (without process groups)
holding the reducing communicator double (``testkit/doubles/reducing_communicator.py``), and
calls sglang's own ``GroupCoordinator.reduce_scatter_tensor``:

* eagerly (sglang: unregistered reduction);
* in warm-up (communicator capturing, stream not: sglang zeroes the output);
* inside ``torch.cuda.graph`` (``torch.cuda.is_current_stream_capturing()`` is genuinely true),
  on an input the graph itself allocates, then replays the graph on new inputs and compares
  with the expected reduction; the pointers the communicator would IPC-export after capture are
  exported with ``cuIpcGetMemHandle`` to show whether that step would succeed.

The only simulated fact is the platform: ``parallel_state.is_hip`` answers ``True`` so that
sglang takes its AITER path on this CUDA device. ``single`` mode reduces over virtual ranks on one
GPU; ``nccl`` mode runs two ranks, one per GPU, with a real NCCL ``reduce_scatter_tensor``.

Usage (repository root, sglang importable)::

    python gpu/reduce_scatter_capture.py          # every mode the machine supports
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ALLOCATORS = {"default": "", "expandable": "expandable_segments:True"}
ROWS, COLS = 4, 256
TMS = "SGLANG_MEMORY_SAVER_CUDA_GRAPH"

# (case, communicator flag, TMS env, call the method below the hook)
CASES: list[tuple[str, bool | None, bool, bool]] = [
    ("fast path (flag on)", True, False, False),
    ("comm flag off", False, False, False),
    ("comm flag missing", None, False, False),
    ("TMS on", True, True, False),
    ("comm flag off, WITHOUT the hook", False, False, True),
]


def _make_discoverable() -> None:
    """Entry-point metadata for the source tree, so sglang's loader finds the plugin."""
    site = Path(tempfile.mkdtemp(prefix="rs-ep-"))
    info = site / "sglang_aiter_plugin-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang-aiter-plugin\n"
                                   "Version: 0.1.0\n")
    (info / "entry_points.txt").write_text("[sglang.srt.plugins]\n"
                                           "aiter_ext = sglang_aiter_plugin:register\n")
    sys.path.append(str(site))


def _expected_registered(flag: bool | None, tms: bool, raw: bool) -> bool:
    return raw or not (tms or flag is False)


def _layers(fn: Any) -> int:
    depth = 0
    while hasattr(fn, "__wrapped__"):
        fn, depth = fn.__wrapped__, depth + 1
    return depth


def worker(mode: str, rank: int, world: int) -> list[dict[str, Any]]:
    sys.modules["aiter"] = None  # type: ignore[assignment]
    _make_discoverable()
    import torch
    from sglang.srt.plugins import load_plugins

    load_plugins()
    from sglang.srt.distributed import parallel_state as ps

    from sglang_aiter_plugin._registration import last_statuses
    from testkit.doubles.reducing_communicator import ReducingCommunicator

    ps.is_hip = lambda: True  # the platform is the one simulated fact (see the docstring)
    device = torch.device("cuda", rank)
    torch.cuda.set_device(device)
    group = None
    if mode == "nccl":
        torch.distributed.init_process_group("nccl", rank=rank, world_size=world,
                                             device_id=device)
        group = torch.distributed.group.WORLD
    status = {s.name: str(s) for s in last_statuses() or []}["reduce-scatter-tms"]
    method = ps.GroupCoordinator._maybe_aiter_reduce_scatter
    layers = _layers(method)
    raw = inspect.unwrap(method)
    results = []
    for case, flag, tms, unhooked in CASES:
        os.environ[TMS] = "1" if tms else "0"
        comm = ReducingCommunicator(world_size=world, rank=rank, max_elements=world * ROWS * COLS,
                                    register_flag=flag, group=group, device=device)
        coordinator: Any = object.__new__(ps.GroupCoordinator)
        coordinator.ca_comm, coordinator.world_size = comm, world

        def call(out: Any, inp: Any, coordinator: Any = coordinator) -> None:
            if unhooked:  # noqa: B023 (called within this iteration only)
                assert raw(coordinator, out, inp) is True
            else:
                coordinator.reduce_scatter_tensor(out, inp)

        scale = world * (world + 1) / 2
        base = torch.empty((world * ROWS, COLS), device=device)
        out = torch.empty((ROWS, COLS), device=device)

        def fill(step: int, base: Any = base) -> Any:
            torch.manual_seed(step)
            values = torch.randn((world * ROWS, COLS), device=device)
            base.copy_(values)
            return values.view(world, ROWS, COLS)[rank] * scale  # noqa: B023 (same iteration)

        expected = fill(0)
        call(out, base * (rank + 1))
        eager_err = (out - expected).abs().max().item()
        eager_registered = list(comm.calls)
        with comm.capture():
            out.fill_(5.0)
            call(out, base * (rank + 1))
            warmup_zeroed = bool((out == 0).all().item()) and len(comm.calls) == 1
            graph = torch.cuda.CUDAGraph()
            comm.calls.clear()
            with torch.cuda.graph(graph):
                call(out, base * (rank + 1))  # the input lives in the graph's private pool
        captured = list(comm.calls)
        errors = []
        for step in (1, 2, 3):
            expected = fill(step)
            graph.replay()
            torch.cuda.synchronize()
            errors.append((out - expected).abs().max().item())
        want = _expected_registered(flag, tms, unhooked)
        exports = [rc for _, rc in comm.export_results]
        result = {
            "mode": mode, "rank": rank, "alloc": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
            "case": case, "captured_registered": captured, "expected_registered": want,
            "eager_registered": eager_registered, "eager_max_err": eager_err,
            "warmup_zeroed": warmup_zeroed, "replay_max_err": max(errors),
            "ipc_export_rc": exports,
        }
        result["ok"] = (captured == [want] and eager_registered == [False] and warmup_zeroed
                        and eager_err < 1e-4 and max(errors) < 1e-4)
        results.append(result)
        del graph
    if group is not None:
        torch.distributed.destroy_process_group()
    print("STATUS " + json.dumps({"rank": rank, "status": status, "layers": layers}))
    return results


def _spawn(mode: str, alloc: str, world: int) -> tuple[list[dict[str, Any]], list[str]]:
    env = dict(os.environ, SGLANG_DP_USE_REDUCE_SCATTER="1", PYTORCH_CUDA_ALLOC_CONF=alloc,
               MASTER_ADDR="127.0.0.1", MASTER_PORT="29517")
    env.pop(TMS, None)
    ranks = world if mode == "nccl" else 1
    procs = [subprocess.Popen([sys.executable, __file__, "--worker", mode, str(r), str(world)],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for r in range(ranks)]
    results, statuses = [], []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=400)
        for line in stdout.splitlines():
            if line.startswith("RESULT "):
                results.extend(json.loads(line[7:]))
            elif line.startswith("STATUS "):
                statuses.append(line[7:])
        if proc.returncode != 0:
            print(f"worker {mode}/{alloc or 'default'} exited {proc.returncode}:\n{stderr[-3000:]}")
    return results, statuses


def main() -> int:
    import torch

    gpus = torch.cuda.device_count()
    print(f"torch {torch.__version__}, {gpus} x {torch.cuda.get_device_name(0)}")
    runs = [("single", alloc, 2) for alloc in ALLOCATORS.values()]
    if gpus >= 2:
        runs += [("nccl", alloc, 2) for alloc in ALLOCATORS.values()]
    failed = 0
    for mode, alloc, world in runs:
        results, statuses = _spawn(mode, alloc, world)
        print(f"\n== {mode}, PYTORCH_CUDA_ALLOC_CONF={alloc or '(unset)'}")
        for status in statuses:
            print(f"   {status}")
        if not results:
            failed += 1
        for r in results:
            failed += not r["ok"]
            verdict = "ok" if r["ok"] else "FAIL"
            print(f"   rank {r['rank']} {r['case']:<32} "
                  f"captured registered={r['captured_registered']} "
                  f"(want [{r['expected_registered']}]) eager={r['eager_registered']} "
                  f"warm-up zeroed={r['warmup_zeroed']} "
                  f"replay max err={r['replay_max_err']:.2e} "
                  f"IPC export rc={r['ipc_export_rc']} -> {verdict}")
    print(f"\n{'all cases ok' if not failed else f'{failed} case(s) failed'}")
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        sys.path.insert(0, str(ROOT))
        out = worker(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
        print("RESULT " + json.dumps(out))
        sys.exit(0)
    sys.exit(main())
