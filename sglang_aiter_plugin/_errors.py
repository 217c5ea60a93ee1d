"""The plugin's one exception base, the built-in exceptions it raises on purpose
(:data:`BUILT_IN_RAISES`, the only ones), and how its messages echo what a user typed."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["BUILT_IN_RAISES", "AiterExtError", "PluginAttributeError", "shorten", "summarise"]


class AiterExtError(Exception):
    """Base of every exception the plugin raises; each subclass also derives from its built-in
    (``ValueError``, ``RuntimeError``), so ``except`` clauses for those keep working."""


class PluginAttributeError(AiterExtError, AttributeError):
    """The package has no such attribute (``sglang_aiter_plugin.<name>``)."""


BUILT_IN_RAISES: dict[tuple[str, str], str] = {
    ("selftest/decode_batch.py", "AttributeError"):
        "the stand-in batch's attribute protocol: a field it lacks must read as absent "
        "(getattr with a default, hasattr), as on sglang's own batch",
    ("fixes/collectives/probe.py", "AttributeError"):
        "the probe's stand-in communicator: a call aiter's communicator lacks must read as "
        "absent (sglang asks hasattr first)",
}
"""The only exceptions the package raises that are not an :class:`AiterExtError`: (file in the
package, built-in) -> why; ``tests/test_raises.py`` holds the source to it."""


def shorten(value: str, limit: int = 80, *, quoted: bool = True) -> str:
    """``value`` (its ``repr`` when ``quoted``), cut to ``limit`` characters with a marker
    saying how long it was."""
    cut = value[:limit]
    text = repr(cut) if quoted else cut
    return text if len(value) <= limit else f"{text}... ({len(value):,} characters in all)"


def summarise(items: Sequence[str], limit: int = 5) -> str:
    """The first ``limit`` items (each shortened), then how many more there are."""
    shown = ", ".join(shorten(i) for i in items[:limit])
    rest = len(items) - limit
    return f"{shown} and {rest:,} more" if rest > 0 else shown
