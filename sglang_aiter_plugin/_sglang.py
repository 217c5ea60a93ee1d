"""Facts about the installed sglang that every part of the plugin needs, read cheaply."""

from __future__ import annotations

import functools
import sys
from importlib.metadata import PackageNotFoundError, version

from packaging.version import InvalidVersion, Version

from sglang_aiter_plugin import _releases

__all__ = ["SUPPORTED_RANGE", "Support", "installed_sglang_version", "support_of"]

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
    """What the plugin says of sglang release ``v`` (one of :class:`Support`'s values)."""
    if v is None:
        return Support.MISSING
    release = Version(v.base_version)
    if not Version(_releases.OLDEST_SUPPORTED) <= release < Version(_releases.SUPPORTED_BELOW):
        return Support.UNSUPPORTED
    if release > Version(_releases.NEWEST_TESTED):
        return Support.UNTESTED
    return Support.SUPPORTED
