"""Facts about the installed sglang that every part of the plugin needs, read cheaply."""

from __future__ import annotations

import functools
import sys
from importlib.metadata import PackageNotFoundError, version

from packaging.version import InvalidVersion, Version

from sglang_aiter_plugin import _releases

__all__ = [
    "NEWEST_TESTED",
    "OLDEST_SUPPORTED",
    "SUPPORTED_RANGE",
    "Support",
    "installed_sglang_version",
    "support_of",
]

OLDEST_SUPPORTED = Version(_releases.OLDEST_SUPPORTED)
"""The first release with ``sglang.srt.plugins`` (absent in 0.5.10)."""
NEWEST_TESTED = Version(_releases.NEWEST_TESTED)
"""The newest release the compatibility matrix covers."""
SUPPORTED_RANGE = f"{_releases.OLDEST_SUPPORTED} to {_releases.NEWEST_TESTED}"
"""The supported releases, as a phrase for messages."""


class Support:
    """What :func:`support_of` says of a release: one of these strings. (Constants, not an enum:
    this module loads in every process at start-up, where creating an enum class costs about
    as much as the rest of the module.)"""

    SUPPORTED = "supported"
    UNTESTED = "untested (newer than the compatibility matrix)"
    UNSUPPORTED = "unsupported"
    MISSING = "not installed"


@functools.lru_cache(maxsize=1)
def installed_sglang_version() -> Version | None:
    """The installed sglang release, read once per process.

    From the already imported ``sglang`` package (its build-time ``__version__``; sglang's
    loader, which calls the plugin, has imported it) or else from package metadata, without
    importing sglang. Reading metadata parses a file, so the answer is kept.
    """
    module = sys.modules.get("sglang")
    raw = getattr(module, "__version__", None) if module is not None else None
    try:
        return Version(raw if isinstance(raw, str) else version("sglang"))
    except (PackageNotFoundError, InvalidVersion):
        return None


def support_of(v: Version | None) -> str:
    if v is None:
        return Support.MISSING
    release = Version(v.base_version)
    if release < OLDEST_SUPPORTED or release >= Version(_releases.SUPPORTED_BELOW):
        return Support.UNSUPPORTED
    if release > NEWEST_TESTED:
        return Support.UNTESTED
    return Support.SUPPORTED
