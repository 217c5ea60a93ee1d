"""Each collective fix's "Remove when", executable: the probe's verdict on the installed release.

Runs on every release CI tests, including ones newer than the recorded facts. A release that
honours every switch for a collective turns its test red with what to do; so does a release whose
all-reduce registers during a capture despite a condition (the plugin has no all-reduce fix:
every supported release honours them), found through sglang's own code
(``testkit.all_reduce_capture``).
"""

from __future__ import annotations

from typing import Any

import pytest
from packaging.version import Version

from sglang_aiter_plugin._status import FixState
from sglang_aiter_plugin.fixes.collectives import FIXES
from sglang_aiter_plugin.fixes.collectives.fix import Decision
from testkit.all_reduce_capture import OUT_PLACE, registering
from testkit.collective_verdicts import verdicts

OBJECTS = {"capture-all-gather": "ALL_GATHER", "capture-reduce-scatter": "REDUCE_SCATTER",
           "capture-fused-ar-rmsnorm": "FUSED_AR_RMSNORM"}


@pytest.fixture(scope="module")
def found() -> dict[str, Decision]:
    return verdicts()


@pytest.mark.parametrize("fix", [f.name for f in FIXES])
def test_fix_is_still_needed(found: dict[str, Decision], fix: str, sglang_version: Version) -> None:
    verdict = found[fix]
    if verdict.status.state is FixState.SKIPPED:
        pytest.skip(f"sglang {sglang_version}: {verdict.status.detail}")
    assert verdict.status.state is FixState.APPLIED, (
        f"sglang {sglang_version} no longer needs {fix} ({verdict.status.detail}). Its ledger's "
        f"'Remove when' is met once {sglang_version} or a later release is the oldest supported "
        f"one: then delete {OBJECTS[fix]} from sglang_aiter_plugin.fixes.collectives (and from its "
        f"FIXES) and {fix} from sglang_aiter_plugin.fixes.BUILTIN_FIXES. Until then, record the "
        f"release in testkit/collective_facts.py.")


def test_all_reduce_still_needs_no_fix(sglang_version: Version) -> None:
    found = registering()
    assert found == [], (
        f"sglang {sglang_version}'s all-reduce registers during CUDA-graph capture despite "
        f"{'; '.join(found)}. The plugin has no all-reduce fix: add one (as for the other "
        "collectives, in sglang_aiter_plugin.fixes.collectives) before supporting this release.")


def test_the_all_reduce_tripwire_fires_on_a_release_that_registers() -> None:
    """The same probes through sglang's real classes, each changed the way a release could: an
    out-of-place all-reduce that registers whatever aiter's flag says, a dispatch that builds
    aiter's communicator registering under TMS, and sglang's own communicator doing the same."""
    import functools
    from types import SimpleNamespace

    from sglang.srt.distributed.device_communicators import custom_all_reduce as car
    from sglang.srt.distributed.parallel_state import GroupCoordinator

    class Registering(GroupCoordinator):  # type: ignore[misc]
        def _all_reduce_out_place(self, input_: Any, outplace_all_reduce_method: Any) -> Any:
            return self.ca_comm.reduce_scatter(input_, input_, registered=True)

    class OwnRegistering(car.CustomAllreduce):  # type: ignore[misc]
        def custom_all_reduce(self, input: Any) -> Any:
            return self._all_reduce_impl(input, registered=True)

    def dispatch_custom_allreduce(group: Any, device: Any) -> Any:
        from aiter.dist.device_communicators.custom_all_reduce import CustomAllreduce

        return functools.partial(CustomAllreduce, enable_register_for_capturing=True)

    changed = SimpleNamespace(dispatch_custom_allreduce=dispatch_custom_allreduce,
                              CustomAllreduce=OwnRegistering)
    found = registering(Registering, changed)  # type: ignore[arg-type]
    assert len(found) == 3, found
    assert found[0] == ("communicator enable_register_for_capturing=False (GroupCoordinator."
                        f"{OUT_PLACE} calls reduce_scatter)")
    assert found[1] == ("SGLANG_MEMORY_SAVER_CUDA_GRAPH=1 (aiter's communicator built with "
                        "enable_register_for_capturing={False: True, True: True})")
    assert found[2] == ("SGLANG_MEMORY_SAVER_CUDA_GRAPH=1 (sglang's own CustomAllreduce "
                        "registers: {False: True, True: True})")
    assert registering(GroupCoordinator, car) == []  # the unchanged release, as above
