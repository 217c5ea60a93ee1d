"""GPU tier of the collective fixes: each wrapper inside a real ``torch.cuda.graph`` capture.

Every process enters the ROCm platform double (``testkit/doubles/rocm_platform``: sglang's
``is_hip()`` answers ``True``, so sglang takes its AITER paths on this CUDA device; the one
simulated fact), loads the plugin through sglang's real ``load_plugins()`` (the wrappers are the
ones the plugin installs on a ROCm host), builds a real ``GroupCoordinator`` (without process
groups) holding the reducing communicator double (``testkit/doubles/reducing_communicator.py``,
real collectives on the stream, aiter's memory contract), and calls sglang's own entry points:
``all_gather_into_tensor`` and ``reduce_scatter_tensor`` (public), ``_all_reduce_out_place(x,
"ca")`` (what its ``all_reduce`` calls for the custom all-reduce), ``fused_allreduce_rmsnorm``
and ``fused_allreduce_rmsnorm_quant_per_group`` (a caller that, like sglang's layers, falls back
to ``_all_reduce_out_place(x, "ca")`` and a plain RMSNorm when the fused call returns ``None``):

* eagerly (sglang: unregistered);
* in warm-up (communicator capturing, stream not: no collective);
* inside ``torch.cuda.graph`` on inputs the graph itself allocates, then three replays on new
  inputs compared with an eager reference; every pointer the communicator would IPC-export after
  the capture is exported with ``cuIpcGetMemHandle`` to show whether that step would work.

Each method runs wrapped and unwrapped (``inspect.unwrap``: sglang's own), for
``SGLANG_MEMORY_SAVER_CUDA_GRAPH`` off/on x the communicator's ``enable_register_for_capturing``
on/off/missing, in one process per ``PYTORCH_CUDA_ALLOC_CONF`` (default, expandable segments) x
``SGLANG_AITER_CAPTURE_COPY_IN`` (0, 1; read at sglang's import). Fused calls also run with a
communicator without the unregistered forms (only where TMS implies the flag off, as sglang
builds aiter's communicator). ``single`` mode reduces over virtual ranks on one GPU; ``nccl``
mode runs two ranks, one per GPU, with real NCCL collectives.

Usage (repository root, sglang importable)::

    python gpu/collectives_capture.py            # single mode; adds nccl with 2+ GPUs
    python gpu/collectives_capture.py --modes nccl
"""

from __future__ import annotations

import argparse
import inspect
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from testkit.collective_facts import METHOD_FIXES as METHODS  # method -> fix

ROOT = Path(__file__).resolve().parent.parent
ALLOCATORS = {"default": "", "expandable": "expandable_segments:True"}
ROWS, COLS, GROUP, EPS = 4, 256, 128, 1e-6
TMS = "SGLANG_MEMORY_SAVER_CUDA_GRAPH"
FUSED = ("fused_allreduce_rmsnorm", "fused_allreduce_rmsnorm_quant_per_group")
FLAGS = {"flag on": True, "flag off": False, "flag missing": None}


def _all_reduce_registers(variant: str, copy_in: bool, flag: bool | None) -> bool:
    """Whether a captured custom all-reduce registers: aiter's follows its flag (sglang builds it
    off under TMS: that is sglang's part); the plugin's wrapper turns it off under copy-in, which
    a communicator without the flag cannot be told (the wrapper then warns)."""
    if variant == "wrapped" and copy_in and flag is not None:
        return False
    return flag is not False


def _expected(method: str, variant: str, kind: str, *, tms: bool, copy_in: bool,
              flag: bool | None, version: Any) -> list[list[Any]]:
    """The calls the capture makes on the communicator: ``[method, registered]``."""
    if method == "_all_reduce_out_place":
        return [["custom_all_reduce", _all_reduce_registers(variant, copy_in, flag)]]
    from sglang_aiter_plugin.fixes.collectives.probe import Condition
    from testkit.collective_facts import honoured_upstream

    honoured = (frozenset(Condition) if variant == "wrapped"
                else honoured_upstream(METHODS[method], version))
    unsafe = ((tms and Condition.TMS in honoured) or (copy_in and Condition.COPY_IN in honoured)
              or (flag is False and Condition.COMM_FLAG in honoured))
    if method == "_all_gather_into_tensor":
        return [["all_gather_unreg", False]] if unsafe else [["all_gather_reg", True]]
    if method == "_maybe_aiter_reduce_scatter":
        return [["reduce_scatter", not unsafe]]
    quant = method == "fused_allreduce_rmsnorm_quant_per_group"
    if not unsafe:
        return [["custom_fused_ar_rms_per_group_quant" if quant else "custom_fused_ar_rms", True]]
    if kind == "full":
        return [["fused_ar_rms_per_group_quant" if quant else "fused_ar_rms", False]]
    # sglang's unfused all-reduce, through the plugin's wrapper on _all_reduce_out_place
    return [["custom_all_reduce", _all_reduce_registers("wrapped", copy_in, flag)]]


class Case:
    """One method x variant x communicator on one rank: inputs, outputs and the calls."""

    def __init__(self, ps: Any, comm: Any, method: str, variant: str, rank: int, world: int,
                 device: Any, number: int) -> None:
        import torch

        self.ps, self.comm, self.method, self.variant = ps, comm, method, variant
        self.rank, self.world = rank, world
        coordinator: Any = object.__new__(ps.GroupCoordinator)
        coordinator.ca_comm, coordinator.world_size = comm, world
        coordinator.rank_in_group, coordinator.unique_name = rank, f"collectives_{number}"
        for name in ("pynccl_comm", "pymscclpp_comm", "qr_comm", "torch_symm_mem_comm",
                     "pcie_ipc_comm"):  # aiter's communicator is this coordinator's only one
            setattr(coordinator, name, None)
        ps._register_group(coordinator)  # sglang's custom ops find groups by name
        self.coordinator = coordinator
        self.base = torch.empty((world * ROWS, COLS), device=device)
        self.res_base = torch.empty((ROWS, COLS), device=device)
        self.weight = torch.rand(COLS, device=device) + 0.5
        shape = (world * ROWS, COLS) if method == "_all_gather_into_tensor" else (ROWS, COLS)
        self.outs = {"out": torch.empty(shape, device=device),
                     "res": torch.empty((ROWS, COLS), device=device)}

    def _below(self, name: str) -> Any:
        return inspect.unwrap(self.ps.GroupCoordinator.__dict__[name])

    def _fused(self, x: Any, res: Any) -> Any:
        from testkit.doubles.reducing_communicator import fused_reference

        c = self.coordinator
        out = (c.fused_allreduce_rmsnorm(x, res, self.weight, EPS) if self.variant == "wrapped"
               else self._below("fused_allreduce_rmsnorm")(c, x, res, self.weight, EPS))
        if out is None:  # sglang's unfused path: its all-reduce, then RMSNorm
            out = fused_reference(c._all_reduce_out_place(x, "ca"), res, self.weight, EPS)
        return out

    def call(self) -> None:
        """The collective on inputs computed here (inside a capture: in the graph's pool)."""
        from testkit.doubles.reducing_communicator import quant_reference

        c, m, wrapped = self.coordinator, self.method, self.variant == "wrapped"
        if m == "_all_gather_into_tensor":
            x = self.base[:ROWS] * (self.rank + 1)
            if wrapped:
                c.all_gather_into_tensor(self.outs["out"], x)
            else:
                self._below(m)(c, self.outs["out"], x)
            return
        if m == "_maybe_aiter_reduce_scatter":
            x = self.base * (self.rank + 1)
            if wrapped:
                c.reduce_scatter_tensor(self.outs["out"], x)
            else:
                assert self._below(m)(c, self.outs["out"], x) is True
            return
        x, res = self.base[:ROWS] * (self.rank + 1), self.res_base * 1.0
        if m == "_all_reduce_out_place":  # sglang's custom all-reduce, as its all_reduce calls it
            self.outs["out"].copy_(c._all_reduce_out_place(x, "ca") if wrapped
                                   else self._below(m)(c, x, "ca"))
            return
        if m == "fused_allreduce_rmsnorm":
            out, res_out = self._fused(x, res)
            self.outs["out"].copy_(out)
            self.outs["res"].copy_(res_out)
            return
        got = (c.fused_allreduce_rmsnorm_quant_per_group(x, res, self.weight, EPS) if wrapped
               else self._below(m)(c, x, res, self.weight, EPS))
        if got is None:  # sglang's fall-back: fused all-reduce + RMSNorm, then a quant
            normed, res_out = self._fused(x, res)
            q, scale = quant_reference(normed, GROUP)
            got = (q, res_out, scale)
        self.outs["out"].copy_(got[0].float() * got[2].repeat_interleave(GROUP, -1))
        self.outs["res"].copy_(got[1])

    def expect(self, step: int) -> dict[str, Any]:
        """New inputs for ``step`` and the eager reference for them."""
        import torch

        from testkit.doubles.reducing_communicator import fused_reference, quant_reference

        torch.manual_seed(step)
        self.base.copy_(torch.randn(self.base.shape, device=self.base.device))
        self.res_base.copy_(torch.randn(self.res_base.shape, device=self.base.device))
        scale = self.world * (self.world + 1) / 2
        if self.method == "_all_gather_into_tensor":
            x = self.base[:ROWS]
            return {"out": torch.cat([x * (k + 1) for k in range(self.world)])}
        if self.method == "_maybe_aiter_reduce_scatter":
            return {"out": self.base.view(self.world, ROWS, COLS)[self.rank] * scale}
        if self.method == "_all_reduce_out_place":
            return {"out": self.base[:ROWS] * scale}
        normed, res_out = fused_reference(self.base[:ROWS] * scale, self.res_base, self.weight,
                                          EPS)
        if self.method == "fused_allreduce_rmsnorm":
            return {"out": normed, "res": res_out}
        q, s = quant_reference(normed, GROUP)
        return {"out": q.float() * s.repeat_interleave(GROUP, -1), "res": res_out}

    def error(self, want: dict[str, Any]) -> tuple[float, bool]:
        """Largest difference from the reference, and whether each output is within tolerance.

        Float outputs: 1e-4. The per-group-quant output is compared dequantized, within one
        float8 e4m3 step at the top of the range (1/8 of the largest value): two ranks' NCCL
        sum and the reference's product may round the last bit differently.
        """
        worst, ok = 0.0, True
        for key, ref in want.items():
            diff = float((self.outs[key] - ref).abs().max().item())
            quant = key == "out" and self.method == "fused_allreduce_rmsnorm_quant_per_group"
            tolerance = float(ref.abs().max().item()) / 8 if quant else 1e-4
            worst, ok = max(worst, diff), ok and diff <= tolerance
        return worst, ok

    def run(self) -> dict[str, Any]:
        """Eager, warm-up, capture, three replays; what happened at each step."""
        import torch

        comm = self.comm
        want = self.expect(0)
        self.call()
        (eager_err, eager_ok), eager = self.error(want), [list(c) for c in comm.calls]
        comm.calls.clear()
        with comm.capture():
            for value in self.outs.values():
                value.fill_(5.0)
            self.call()
            warmup_calls = [list(c) for c in comm.calls]
            checked = ("out", "res") if self.method in FUSED else ("out",)
            warmup_zeroed = all(bool((self.outs[k] == 0).all()) for k in checked)
            comm.calls.clear()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                self.call()
        captured = [list(c) for c in comm.calls]
        errors = []
        for step in (1, 2, 3):
            want = self.expect(step)
            graph.replay()
            torch.cuda.synchronize()
            errors.append(self.error(want))
        return {"captured": captured, "eager": eager, "eager_max_err": eager_err,
                "warmup_calls": warmup_calls, "warmup_zeroed": warmup_zeroed,
                "replay_max_err": max(e for e, _ in errors),
                "within_tolerance": eager_ok and all(ok for _, ok in errors),
                "ipc_export_rc": [rc for _, rc in comm.export_results]}


def worker(mode: str, rank: int, world: int) -> None:
    sys.modules["aiter"] = None  # type: ignore[assignment]
    import torch
    from sglang.srt.distributed import parallel_state as ps

    from testkit.doubles.rocm_platform import simulated_rocm

    rocm = simulated_rocm(is_gfx95_supported=True)  # the one simulated fact (module doc)
    rocm.__enter__()
    from sglang.srt.plugins import load_plugins

    _make_discoverable()
    load_plugins()
    from sglang_aiter_plugin._registration import last_statuses
    from sglang_aiter_plugin._sglang import installed_sglang_version
    from testkit.doubles.reducing_communicator import (
        ReducingCommunicator,
        ReducingCommunicatorWithoutUnregisteredFused,
    )

    version = installed_sglang_version()
    kinds = {"full": ReducingCommunicator,
             "no-unregistered-fused": ReducingCommunicatorWithoutUnregisteredFused}
    device = torch.device("cuda", rank)
    torch.cuda.set_device(device)
    group = None
    if mode == "nccl":
        torch.distributed.init_process_group("nccl", rank=rank, world_size=world,
                                             device_id=device)
        group = torch.distributed.group.WORLD
    copy_in = os.environ.get("SGLANG_AITER_CAPTURE_COPY_IN") == "1"
    statuses = {s.name: str(s) for s in last_statuses() or []}
    print("STATUS " + json.dumps({"rank": rank, "statuses": statuses}), flush=True)
    results = []
    number = 0
    for method, variant, (flag_name, flag), tms in itertools.product(
            METHODS, ("wrapped", "unwrapped"), FLAGS.items(), (False, True)):
        if method not in ps.GroupCoordinator.__dict__:
            continue
        for kind in (kinds if method in FUSED else ("full",)):
            if kind != "full" and tms and flag is not False:
                continue  # sglang builds aiter's communicator with the flag off under TMS
            number += 1
            os.environ[TMS] = "1" if tms else "0"
            comm = kinds[kind](world_size=world, rank=rank, max_elements=world * ROWS * COLS,
                               register_flag=flag, group=group, device=device)
            got = Case(ps, comm, method, variant, rank, world, device, number).run()
            expected = _expected(method, variant, kind, tms=tms, copy_in=copy_in, flag=flag,
                                 version=version)
            result = {"mode": mode, "rank": rank, "copy_in": copy_in, "method": method,
                      "variant": variant, "kind": kind, "tms": tms, "flag": flag_name,
                      "expected": expected, **got}
            result["ok"] = (got["captured"] == expected and got["warmup_calls"] == []
                            and got["warmup_zeroed"]
                            and all(not registered for _, registered in got["eager"])
                            and got["within_tolerance"])
            results.append(result)
    if group is not None:
        torch.distributed.destroy_process_group()
    print("RESULT " + json.dumps(results), flush=True)


def _make_discoverable() -> None:
    """Entry-point metadata for the source tree, so sglang's loader finds the plugin."""
    import tempfile

    from testkit.distributions import write_distribution

    site = write_distribution(
        Path(tempfile.mkdtemp(prefix="collectives-ep-")), "sglang-aiter-plugin", modules={},
        entry_points={"sglang.srt.plugins": {"aiter_ext": "sglang_aiter_plugin:register"}},
    )
    sys.path.append(str(site))


def _spawn(mode: str, alloc: str, copy_in: bool, world: int, port: int) -> tuple[list[Any],
                                                                             list[str], int]:
    env = dict(os.environ, SGLANG_DP_USE_REDUCE_SCATTER="1", SGLANG_USE_AITER_AG="1",
               PYTORCH_CUDA_ALLOC_CONF=alloc, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
               SGLANG_AITER_CAPTURE_COPY_IN="1" if copy_in else "0")
    env.pop(TMS, None)
    ranks = world if mode == "nccl" else 1
    procs = [subprocess.Popen([sys.executable, __file__, "--worker", mode, str(r), str(world)],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for r in range(ranks)]
    results: list[Any] = []
    statuses: list[str] = []
    failed = 0
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=500)
        for line in stdout.splitlines():
            if line.startswith("RESULT "):
                results.extend(json.loads(line[7:]))
            elif line.startswith("STATUS "):
                statuses.append(line[7:])
        if proc.returncode != 0:
            failed += 1
            print(f"worker {mode}/{alloc or 'default'} exited {proc.returncode}:\n"
                  f"{stderr[-3000:]}")
    return results, statuses, failed


def _summary(results: list[dict[str, Any]], copy_in: bool) -> str:
    """Registering captures and failed IPC exports, by variant and by whether a switch is on."""
    def switch(r: dict[str, Any]) -> bool:
        return bool(r["tms"] or copy_in or r["flag"] == "flag off")

    parts = []
    for variant in ("wrapped", "unwrapped"):
        for on in (True, False):
            rows = [r for r in results if r["variant"] == variant and switch(r) is on]
            registering = [r for r in rows if r["ipc_export_rc"]]
            failing = [r for r in registering if any(r["ipc_export_rc"])]
            parts.append(f"{variant}, {'a switch on' if on else 'no switch on'}: "
                         f"{len(registering)} of {len(rows)} register, {len(failing)} export fails")
    return "; ".join(parts)


def main(argv: list[str] | None = None) -> int:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--modes", nargs="+", choices=("single", "nccl"))
    args = parser.parse_args(argv)
    gpus = torch.cuda.device_count()
    print(f"torch {torch.__version__}, {gpus} x {torch.cuda.get_device_name(0)}")
    modes = args.modes or (["single", "nccl"] if gpus >= 2 else ["single"])
    failed = 0
    port = 29517
    for mode, alloc, copy_in in itertools.product(modes, ALLOCATORS.values(), (False, True)):
        port += 1
        results, statuses, crashed = _spawn(mode, alloc, copy_in, 2, port)
        failed += crashed
        print(f"\n== {mode}, PYTORCH_CUDA_ALLOC_CONF={alloc or '(unset)'}, "
              f"SGLANG_AITER_CAPTURE_COPY_IN={int(copy_in)}")
        for status in statuses[:1]:
            print(f"   {status}")
        for r in results:
            failed += not r["ok"]
            print(f"   rank {r['rank']} {r['method']:<40} {r['variant']:<9} {r['kind']:<21} "
                  f"TMS={int(r['tms'])} {r['flag']:<12} captured={r['captured']} "
                  f"eager={r['eager']} replay err={r['replay_max_err']:.1e} "
                  f"IPC rc={r['ipc_export_rc']} -> {'ok' if r['ok'] else 'FAIL'}")
        print("   " + _summary(results, copy_in))
    print(f"\n{'all cases ok' if not failed else f'{failed} case(s) failed'}")
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
        sys.exit(0)
    sys.exit(main())
