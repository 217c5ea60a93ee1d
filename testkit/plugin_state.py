"""Reading the plugin's state in tests: what the package itself never needs to expose."""

from __future__ import annotations

from typing import Any

from sglang_aiter_plugin._status import FixStatus

__all__ = ["pool_frozen", "status_dict"]


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
