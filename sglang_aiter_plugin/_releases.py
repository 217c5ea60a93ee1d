"""The plugin's version and the sglang releases it supports and tests: the one place they are
written down. Plain strings only: the set-up scripts read this file before anything is installed
(``tools/sglang-releases``); ``pyproject.toml`` reads ``__version__`` from it."""

from __future__ import annotations

__all__ = ["BASE", "CI", "NEWEST_TESTED", "OLDEST_SUPPORTED", "SUPPORTED_BELOW", "TESTED",
           "__version__"]

__version__ = "0.1.0"

OLDEST_SUPPORTED = "0.5.11"
"""The first release with ``sglang.srt.plugins`` (absent in 0.5.10)."""
SUPPORTED_BELOW = "0.6"
"""The first release outside the supported series (the requirement's upper bound)."""
TESTED: tuple[str, ...] = (
    "0.5.11", "0.5.12", "0.5.12.post1", "0.5.13", "0.5.13.post1", "0.5.14", "0.5.15",
    "0.5.15.post1", "0.5.16", "0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23",
)
"""Every release the compatibility matrix installs and tests, post releases included."""
NEWEST_TESTED = TESTED[-1]
BASE = NEWEST_TESTED
"""The release of the development environment (``tools/env.sh``)."""
CI: tuple[str, ...] = ("0.5.23", "0.5.15", "0.5.13", "0.5.11")
"""The releases ``tools/test.sh`` (and so CI) runs the suite against, in order."""
