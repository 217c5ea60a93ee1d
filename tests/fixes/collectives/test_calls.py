"""The canary: every call the installed sglang's ``GroupCoordinator`` makes on aiter's
communicator is one the plugin knows; a call it does not know is named with its site.

The first test is the per-release check: on a release where sglang starts calling something the
plugin does not know (a registering collective no fix covers), the compatibility matrix's
collectives column for it fails here. The others run the canary on simulated sources.
"""

from __future__ import annotations

import importlib.util
import json
import textwrap
from pathlib import Path

import pytest
from packaging.version import Version

from sglang_aiter_plugin.fixes.collectives import registered
from sglang_aiter_plugin.fixes.collectives.calls import (
    CommunicatorCall,
    communicator_calls,
    known_as,
)
from sglang_aiter_plugin.fixes.collectives.fix import PARALLEL_STATE
from tests.compat.collective_calls import OUT_JSON, rows


def installed_source() -> str:
    spec = importlib.util.find_spec(PARALLEL_STATE)
    assert spec is not None
    assert spec.origin is not None
    return Path(spec.origin).read_text()


def unknown(source: str) -> list[CommunicatorCall]:
    return [c for c in communicator_calls(source) if known_as(c, registered()) is None]


def coordinator(body: str) -> str:
    """A module whose ``GroupCoordinator`` has the methods in ``body``."""
    return "class GroupCoordinator:\n" + textwrap.indent(textwrap.dedent(body), "    ")


def test_every_call_the_installed_release_makes_on_aiters_communicator_is_known(
    sglang_version: Version
) -> None:
    calls = communicator_calls(installed_source())
    assert calls, "the canary found no call at all: it no longer reads this release"
    found = [f"GroupCoordinator.{c.method} calls ca_comm.{c.name} (line {c.line})"
             for c in calls if known_as(c, registered()) is None]
    assert found == [], (
        f"sglang {sglang_version} makes calls on aiter's communicator the plugin does not know: "
        f"{'; '.join(found)}. Each may register the caller's tensors during CUDA-graph capture "
        "with no fix to take it off that path: give the call its unregistered form "
        "(fixes.collectives.UNREGISTERED) and list the method in a collective fix, or add it to "
        "what the canary knows never registers (fixes/collectives/calls.py, probe.AITER_CALLS).")


def test_the_record_shows_the_installed_release_as_the_canary_reads_it(
    sglang_version: Version
) -> None:
    recorded = {r["release"]: r["rows"] for r in json.loads(OUT_JSON.read_text())["results"]}
    if str(sglang_version) not in recorded:
        pytest.skip(f"sglang {sglang_version} is not in {OUT_JSON.name}")
    assert rows(installed_source()) == recorded[str(sglang_version)], (
        f"{OUT_JSON.name} is out of date: rerun tests/compat/collective_calls.py")


def test_the_canary_names_a_call_it_does_not_know_with_its_site() -> None:
    """The installed release's own source, with one more method: aiter's fused q/k-norm
    all-reduce, which registers during a capture, called from a method no fix probes."""
    source = installed_source()
    lines = source.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("class GroupCoordinator"))
    while not lines[start].rstrip().endswith(":"):
        start += 1
    added = ["    def fused_qknorm_allreduce(self, qkv, q_w, k_w, eps):",
             "        return self.ca_comm.custom_fused_qknorm_ar(qkv, q_w, k_w, eps)"]
    changed = "\n".join([*lines[:start + 1], *added, *lines[start + 1:]])
    assert unknown(source) == []
    assert unknown(changed) == [
        CommunicatorCall("fused_qknorm_allreduce", "custom_fused_qknorm_ar", start + 3)]


def test_a_registering_call_is_known_only_in_a_method_a_fix_probes() -> None:
    source = coordinator("""
        def _all_gather_into_tensor(self, output, input):
            self.ca_comm.all_gather_reg(input, out=output)

        def _gather_twice(self, output, input):
            comm = self.ca_comm
            comm.all_gather_reg(input, out=output)
            comm.reduce_scatter(input, output, registered=True)
            comm.reduce_scatter(input, output, registered=False)
            comm.reduce_scatter(input, output, registered=self.register)
    """)
    assert [(c.method, c.name, c.registered) for c in unknown(source)] == [
        ("_gather_twice", "all_gather_reg", None), ("_gather_twice", "reduce_scatter", True),
        ("_gather_twice", "reduce_scatter", None)]


def test_a_call_without_an_unregistered_form_is_unknown_even_in_a_probed_method() -> None:
    """aiter's ``custom_all_gather`` follows the communicator flag only (no copy-in), and the
    plugin has no form to hand a capture; ``custom_all_reduce`` has one (registration off for
    the call), so it is known in any probed method, and only there."""
    source = coordinator("""
        def _all_gather_into_tensor(self, output, input):
            return self.ca_comm.custom_all_gather(input)

        def _all_reduce_out_place(self, input_, outplace_all_reduce_method):
            return self.ca_comm.custom_all_reduce(input_)

        def fused_allreduce_rmsnorm(self, input_, residual_inp_, weight_, eps):
            return self.ca_comm.custom_all_reduce(input_)

        def all_to_all(self, input_):
            return self.ca_comm.custom_all_reduce(input_)
    """)
    assert [(c.method, c.name) for c in unknown(source)] == [
        ("_all_gather_into_tensor", "custom_all_gather"), ("all_to_all", "custom_all_reduce")]


def test_aiters_further_fused_calls_are_known_in_a_probed_method() -> None:
    source = coordinator("""
        def fused_allreduce_rmsnorm(self, input_, residual_inp_, weight_, eps):
            if (ca_comm := self.ca_comm) is None:
                return None
            ca_comm.custom_fused_ar_rms_quant(input_, residual_inp_, weight_, eps, True)
            ca_comm.custom_fused_ar_rms_mxfp4_quant(input_, residual_inp_, weight_, eps)
            ca_comm.fused_ar_rms_mxfp4_quant(input_, residual_inp_, w=weight_, eps=eps,
                                             registered=False)
            return ca_comm.custom_fused_ar_rms_packed_input(input_, residual_inp_, weight_, eps)
    """)
    calls = communicator_calls(source)
    assert [c.name for c in calls] == [
        "custom_fused_ar_rms_quant", "custom_fused_ar_rms_mxfp4_quant",
        "fused_ar_rms_mxfp4_quant", "custom_fused_ar_rms_packed_input"]
    assert [known_as(c, registered()) for c in calls] == [
        "probed by capture-fused-ar-rmsnorm, which has its unregistered form",
        "probed by capture-fused-ar-rmsnorm, which has its unregistered form",
        "registers nothing during a capture", "registers nothing during a capture"]


def test_only_calls_on_the_coordinators_communicator_count() -> None:
    source = coordinator("""
        def all_reduce(self, input_):
            self.pynccl_comm.all_reduce(input_)
            other = self.qr_comm
            other.quick_all_reduce(input_)
            return getattr(self.ca_comm, "disabled", True)
    """) + "\n\ndef helper(ca_comm):\n    return ca_comm.all_gather_reg(None)\n"
    assert communicator_calls(source) == []


def test_a_source_without_a_group_coordinator_is_refused() -> None:
    with pytest.raises(LookupError, match="no class GroupCoordinator"):
        communicator_calls("class Coordinator:\n    pass\n")
