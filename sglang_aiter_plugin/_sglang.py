"""Facts about the installed sglang that every part of the plugin needs, read cheaply."""

from __future__ import annotations

import enum
from importlib.metadata import PackageNotFoundError, version

from packaging.version import InvalidVersion, Version

__all__ = [
    "NEWEST_TESTED",
    "OLDEST_SUPPORTED",
    "Support",
    "installed_sglang_version",
    "support_of",
]

OLDEST_SUPPORTED = Version("0.5.11")
"""The first release with ``sglang.srt.plugins`` (absent in 0.5.10)."""
NEWEST_TESTED = Version("0.5.23")
"""The newest release the compatibility matrix covers."""


class Support(str, enum.Enum):
    SUPPORTED = "supported"
    UNTESTED = "untested (newer than the compatibility matrix)"
    UNSUPPORTED = "unsupported"
    MISSING = "not installed"

    def __str__(self) -> str:
        return self.value


def installed_sglang_version() -> Version | None:
    """The installed sglang release, read from package metadata (no sglang import)."""
    try:
        return Version(version("sglang"))
    except (PackageNotFoundError, InvalidVersion):
        return None


def support_of(v: Version | None) -> Support:
    if v is None:
        return Support.MISSING
    release = Version(v.base_version)
    if release < OLDEST_SUPPORTED or release >= Version("0.6"):
        return Support.UNSUPPORTED
    if release > NEWEST_TESTED:
        return Support.UNTESTED
    return Support.SUPPORTED
