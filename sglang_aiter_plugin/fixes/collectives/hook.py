"""The per-collective hook state: the plan it follows and the view it hands sglang's method.

A wrapper (written per method, with sglang's parameter names) calls :meth:`Hook.view_for` only
when the coordinator's communicator is in capture mode; eager calls never reach it. The view is
used only while the current stream is really capturing and the plan says registration is unsafe;
otherwise sglang's method gets the coordinator itself (warm-up and piecewise-graph branches
included).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sglang_aiter_plugin.fixes.collectives.switches import Plan
from sglang_aiter_plugin.fixes.collectives.views import CoordinatorView

__all__ = ["Hook"]


class Hook:
    """One collective's hook: ``plan`` (replaced on re-install) and its communicator view."""

    def __init__(self, name: str, view: Callable[[Any], Any]) -> None:
        self.name = name
        self.plan: Plan | None = None
        self._view = view

    def view_for(self, coordinator: Any, communicator: Any) -> Any:
        """What sglang's method gets as ``self`` during this capture-mode call."""
        plan = self.plan
        if plan is None or not plan.unregistered(communicator):
            return coordinator
        import torch

        if not torch.cuda.is_current_stream_capturing():
            return coordinator
        return CoordinatorView(coordinator, self._view(communicator))
