"""What each sglang release does on the AITER reduce-scatter capture path (read from the wheels).

The plugin never uses these facts (it probes behaviour); the tests check the probe against them.
"""

from __future__ import annotations

from packaging.version import Version

from sglang_aiter_plugin.fixes.reduce_scatter_probe import Switch

__all__ = ["FIRST_WITH_METHOD", "NEWEST_KNOWN", "honoured_upstream"]

FIRST_WITH_METHOD = Version("0.5.15")
NEWEST_KNOWN = Version("0.5.23")


def honoured_upstream(v: Version) -> frozenset[Switch]:
    """Switches under which sglang ``v`` itself passes ``registered=False`` during capture."""
    release = Version(v.base_version)
    if release >= Version("0.5.22"):
        return frozenset({Switch.TMS, Switch.COPY_IN})
    if release >= Version("0.5.18"):
        return frozenset({Switch.TMS})
    return frozenset()
