"""The per-collective hook state: the plan it follows and the view it hands sglang's method.

A wrapper (written per method, with sglang's parameter names) calls :meth:`Hook.view_for` only
when the coordinator's communicator is in capture mode; eager calls never reach it. The view is
used only while the current stream is really capturing and the plan says registration is unsafe;
otherwise sglang's method gets the coordinator itself (warm-up and piecewise-graph branches
included).

The views (:mod:`.views`) are imported at the first capture that needs one: nothing else at
start-up needs them, and these modules load in every ROCm process.
"""

from __future__ import annotations

from typing import Any

from sglang_aiter_plugin.fixes.collectives.switches import Plan

__all__ = ["Hook"]


class Hook:
    """One collective's hook: ``plan`` (replaced on re-install) and its communicator view.

    ``view``: the name of the :mod:`.views` class that wraps the communicator for sglang's
    method (``"UnregisteredAllGather"``, ...).
    """

    def __init__(self, name: str, view: str) -> None:
        self.name = name
        self.plan: Plan | None = None
        self.view = view

    def view_for(self, coordinator: Any, communicator: Any) -> Any:
        """What sglang's method gets as ``self`` during this capture-mode call."""
        plan = self.plan
        if plan is None or not plan.unregistered(communicator):
            return coordinator
        import torch

        if not torch.cuda.is_current_stream_capturing():
            return coordinator
        from sglang_aiter_plugin.fixes.collectives import views

        return views.CoordinatorView(coordinator, getattr(views, self.view)(communicator))
