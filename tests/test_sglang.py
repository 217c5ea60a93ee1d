"""Which sglang releases are supported, untested or unsupported, and what doctor says."""

from __future__ import annotations

import pytest
from packaging.version import Version

from sglang_aiter_plugin import _doctor
from sglang_aiter_plugin._sglang import Support, support_of


@pytest.mark.parametrize(
    ("version", "support"),
    [
        ("0.5.10", Support.UNSUPPORTED),  # no sglang.srt.plugins yet
        ("0.5.11", Support.SUPPORTED),
        ("0.5.15.post1", Support.SUPPORTED),
        ("0.5.23", Support.SUPPORTED),
        ("0.5.24", Support.UNTESTED),
        ("0.5.30rc1", Support.UNTESTED),
        ("0.6.0", Support.UNSUPPORTED),
        (None, Support.MISSING),
    ],
)
def test_support_of(version: str | None, support: Support) -> None:
    assert support_of(Version(version) if version else None) is support


@pytest.mark.parametrize(
    ("version", "level", "words"),
    [
        ("0.5.24", "warn", "never tested"),
        ("0.5.9", "FAIL", "supported releases: 0.5.11 to 0.5.23"),
        ("0.5.20", "ok", "supported"),
    ],
)
def test_doctor_warns_on_untested_and_fails_on_unsupported(
    version: str, level: str, words: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_doctor, "installed_sglang_version", lambda: Version(version))
    report = _doctor.Report()
    _doctor._check_sglang(report)
    (check,) = report.checks
    assert check.level == level
    assert check.summary.startswith(f"sglang {version}: ") and words in check.summary
