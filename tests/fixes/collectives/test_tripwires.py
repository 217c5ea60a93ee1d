"""Each collective fix's "Remove when", executable: the probe's verdict on the installed release.

Runs on every release CI tests, including ones newer than the recorded facts. A release that
honours every switch for a collective turns its test red with what to do; so does a release whose
all-reduce registers during a capture despite TMS or the communicator flag (the all-reduce's fix
takes on only copy-in and ranks replaying different graphs: every supported release honours the
other two), found through sglang's own code (``testkit.all_reduce_capture``).
"""

from __future__ import annotations

from typing import Any

import pytest
from packaging.version import Version

from sglang_aiter_plugin._status import FixState
from sglang_aiter_plugin.fixes import BUILTIN_FIXES
from sglang_aiter_plugin.fixes.collectives import registered
from sglang_aiter_plugin.fixes.collectives.fix import Decision
from testkit.all_reduce_capture import OUT_PLACE, registering
from testkit.collective_facts import has_variants
from testkit.collective_verdicts import verdicts

OBJECTS = {name: value.rpartition(":")[2] for name, value in BUILTIN_FIXES}  # name -> its object


@pytest.fixture(scope="module")
def found() -> dict[str, Decision]:
    return verdicts()


@pytest.mark.parametrize("fix", [f.name for f in registered()])
def test_fix_is_still_needed(found: dict[str, Decision], fix: str, sglang_version: Version) -> None:
    verdict = found[fix]
    if verdict.status.state is FixState.SKIPPED:
        pytest.skip(f"sglang {sglang_version}: {verdict.status.detail}")
    if fix == "capture-all-reduce" and not has_variants(sglang_version):
        assert verdict.status.state is FixState.NOT_NEEDED, verdict.status  # without copy-in
        assert verdict.status.detail.startswith("this sglang captures one graph per batch size")
        return
    assert verdict.status.state is FixState.APPLIED, (
        f"sglang {sglang_version} no longer needs {fix} ({verdict.status.detail}). Its ledger's "
        f"'steps aside' is met once {sglang_version} or a later release is the oldest supported "
        f"one: then delete {OBJECTS[fix]} from sglang_aiter_plugin.fixes.collectives and {fix} "
        f"from sglang_aiter_plugin.fixes.BUILTIN_FIXES. Until then, record the release in "
        f"testkit/collective_facts.py.")


def test_all_reduce_still_needs_nothing_under_tms_and_the_communicator_flag(
        sglang_version: Version) -> None:
    found = registering()
    assert found == [], (
        f"sglang {sglang_version}'s all-reduce registers during CUDA-graph capture despite "
        f"{'; '.join(found)}. The plugin's all-reduce fix takes on only copy-in and ranks "
        "replaying different graphs: add the condition to its AllReduceFix.counted (in "
        "sglang_aiter_plugin.fixes.collectives.fix) before supporting this release.")


def test_all_reduce_needs_the_fix_under_replay_and_copy_in(
        found: dict[str, Decision], sglang_version: Version,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Where sglang captures graph variants the all-reduce needs the fix for ranks that may
    replay them apart; under copy-in (which sglang's all-reduce never reads) on every release."""
    from sglang.srt.distributed.parallel_state import GroupCoordinator

    from sglang_aiter_plugin.fixes.collectives import ALL_REDUCE
    from sglang_aiter_plugin.fixes.collectives.probe import Condition

    replay = (Condition.REPLAY,) if has_variants(sglang_version) else ()
    assert found["capture-all-reduce"].ignored == replay
    monkeypatch.setenv("SGLANG_AITER_CAPTURE_COPY_IN", "1")
    copy_in = ALL_REDUCE.decide(GroupCoordinator, sglang_version)
    assert copy_in.status.state is FixState.APPLIED, copy_in.status
    assert copy_in.ignored == (Condition.COPY_IN, *replay)


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
