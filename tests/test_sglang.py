"""Which sglang releases are supported, untested or unsupported, and what doctor says.

Every version here is derived from ``sglang_aiter_plugin._releases``, so widening the supported
range changes one file and these tests follow it.
"""

from __future__ import annotations

import pytest
from packaging.version import Version

from sglang_aiter_plugin import _doctor, _releases, _sglang
from sglang_aiter_plugin._sglang import Support, support_of

OLDEST = Version(_releases.OLDEST_SUPPORTED)
NEWEST = Version(_releases.NEWEST_TESTED)
BELOW_OLDEST = Version(f"{OLDEST.major}.{OLDEST.minor}.{OLDEST.micro - 1}")
ABOVE_NEWEST = Version(f"{NEWEST.major}.{NEWEST.minor}.{NEWEST.micro + 1}")
FIRST_OUTSIDE = Version(_releases.SUPPORTED_BELOW)


@pytest.mark.parametrize(
    ("version", "support"),
    [
        (BELOW_OLDEST, Support.UNSUPPORTED),  # no sglang.srt.plugins yet
        (OLDEST, Support.SUPPORTED),
        (Version(f"{OLDEST}.post1"), Support.SUPPORTED),
        (NEWEST, Support.SUPPORTED),
        (ABOVE_NEWEST, Support.UNTESTED),
        (Version(f"{ABOVE_NEWEST}rc1"), Support.UNTESTED),
        (FIRST_OUTSIDE, Support.UNSUPPORTED),
        (None, Support.MISSING),
    ],
)
def test_support_of(version: Version | None, support: str) -> None:
    assert support_of(version) == support


@pytest.mark.parametrize(
    ("version", "level", "words"),
    [
        (ABOVE_NEWEST, "warn", "never tested"),
        (BELOW_OLDEST, "FAIL", f"supported releases: {OLDEST} to {NEWEST}"),
        (NEWEST, "ok", "supported"),
    ],
)
def test_doctor_warns_on_untested_and_fails_on_unsupported(
    version: Version, level: str, words: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_sglang, "installed_sglang_version", lambda: version)
    report = _doctor.Report()
    _doctor._check_sglang(report)
    (check,) = report.checks
    assert check.level == level
    assert check.summary.startswith(f"sglang {version}: ")
    assert words in check.summary
