"""Double of sglang's ``ModelRunner``: only what the aiter construction sites read before the
backend's own ``__init__`` (which the aiter-constructor double replaces) takes over."""

from __future__ import annotations

from typing import Any

__all__ = ["BareModelRunnerDouble"]


class BareModelRunnerDouble:
    """Carries the resolved ``server_args`` record, as a real model runner does."""

    def __init__(self, server_args: Any = None) -> None:
        self.server_args = server_args
        self.device = "cpu"
