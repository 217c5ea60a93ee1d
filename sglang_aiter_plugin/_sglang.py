"""Facts about the installed sglang that every part of the plugin needs, read cheaply."""

from __future__ import annotations

import functools
import sys
from importlib.metadata import PackageNotFoundError, version

from packaging.version import InvalidVersion, Version

from sglang_aiter_plugin import _releases

__all__ = ["NEWEST_TESTED_VERSION", "OLDEST_SUPPORTED_VERSION", "SUPPORTED_RANGE", "Support",
           "installed_sglang_version", "support_of"]

OLDEST_SUPPORTED_VERSION = Version(_releases.OLDEST_SUPPORTED)
NEWEST_TESTED_VERSION = Version(_releases.NEWEST_TESTED)
SUPPORTED_RANGE = f"{_releases.OLDEST_SUPPORTED} to {_releases.NEWEST_TESTED}"  # for messages


class Support:
    """What :func:`support_of` says of a release (strings, not an enum: cheaper at start-up)."""

    SUPPORTED = "supported"
    UNTESTED = "untested (newer than the compatibility matrix)"
    UNSUPPORTED = "unsupported"
    MISSING = "not installed"


@functools.lru_cache(maxsize=1)
def installed_sglang_version() -> Version | None:
    """The installed sglang release, read once per process: the imported ``sglang`` package's
    ``__version__`` (sglang's loader has imported it), else its metadata (without importing it)."""
    raw = getattr(sys.modules.get("sglang"), "__version__", None)
    try:
        return Version(raw if isinstance(raw, str) else version("sglang"))
    except (PackageNotFoundError, InvalidVersion):
        return None


def support_of(v: Version | None) -> str:
    if v is None:
        return Support.MISSING
    release = Version(v.base_version)
    if release < OLDEST_SUPPORTED_VERSION or release >= Version(_releases.SUPPORTED_BELOW):
        return Support.UNSUPPORTED
    if release > NEWEST_TESTED_VERSION:
        return Support.UNTESTED
    return Support.SUPPORTED
