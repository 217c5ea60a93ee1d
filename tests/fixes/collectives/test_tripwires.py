"""Each collective fix's "Remove when", executable: the probe's verdict on the installed release.

Runs on every release CI tests, including ones newer than the recorded facts. A release that
honours every switch for a collective turns its test red with what to do; so does a release whose
all-reduce starts registering (the plugin has no all-reduce wrapper).
"""

from __future__ import annotations

import pytest
from packaging.version import Version

from sglang_aiter_plugin._status import FixState
from sglang_aiter_plugin.fixes.collectives import FIXES
from sglang_aiter_plugin.fixes.collectives.fix import Decision
from testkit.collective_verdicts import verdicts

OBJECTS = {"capture-all-gather": "ALL_GATHER", "capture-reduce-scatter": "REDUCE_SCATTER",
           "capture-fused-ar-rmsnorm": "FUSED_AR_RMSNORM"}


@pytest.fixture(scope="module")
def found() -> dict[str, Decision]:
    return verdicts()


@pytest.mark.parametrize("fix", [f.name for f in FIXES if f.name != "capture-all-reduce"])
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


def test_all_reduce_still_needs_no_fix(found: dict[str, Decision], sglang_version: Version) -> None:
    status = found["capture-all-reduce"].status
    assert status.state is FixState.NOT_NEEDED, (
        f"sglang {sglang_version} changed its all-reduce capture path ({status.detail}); the "
        "plugin has no all-reduce wrapper: add one (as for the other collectives) before "
        "supporting this release.")
