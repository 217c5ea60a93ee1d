"""Reading the plugin's state in tests: what the package itself never needs to expose."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from sglang_aiter_plugin._status import FixStatus

__all__ = ["fills_page_table", "hooked_methods", "pool_frozen", "status_dict",
           "widened_buffers"]


def status_dict(status: FixStatus) -> dict[str, object]:
    """A fix's status as JSON a child process prints (``waiting_for`` only while pending)."""
    data: dict[str, object] = {"name": status.name, "state": status.state.value,
                               "detail": status.detail}
    if status.waiting_for:
        data["waiting_for"] = list(status.waiting_for)
    return data


def pool_frozen(pool: Any) -> bool:
    """Whether a backend's ``BufferPool`` refuses to grow (its graphs hold its addresses)."""
    return pool._frozen is not None


@contextlib.contextmanager
def widened_buffers() -> Iterator[list[str]]:
    """The names of the graph buffers the backend classes widen meanwhile (``backend.widths``),
    each time it reallocates one."""
    from sglang_aiter_plugin.backend import classes

    widened: list[str] = []
    real = vars(classes)["widen"]  # the name the classes call

    def recording(owner: Any, name: str, *args: Any, **kwargs: Any) -> bool:
        done = bool(real(owner, name, *args, **kwargs))
        if done:
            widened.append(name)
        return done

    setattr(classes, "widen", recording)  # noqa: B010
    try:
        yield widened
    finally:
        setattr(classes, "widen", real)  # noqa: B010


def hooked_methods(backend: Any, patch: str) -> list[str]:
    """The graph metadata methods of ``backend`` wrapped as ``patch`` (``backend.graph_metadata``:
    the bounds check's or the page-table fill's ``PATCH``)."""
    from sglang_aiter_plugin._patch import patched
    from sglang_aiter_plugin.backend.graph_metadata import METADATA_METHODS

    return [n for n in METADATA_METHODS if patched(getattr(backend, n, None), patch)]


def fills_page_table(backend: Any) -> bool:
    """Whether graph set-up installed the unified page-table fill on ``backend``."""
    from sglang_aiter_plugin.backend import page_table

    return bool(hooked_methods(backend, page_table.PATCH))
