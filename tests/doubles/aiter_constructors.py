"""Double of the aiter backend constructors (their real ``__init__`` needs aiter's kernels).

``install(monkeypatch)`` replaces ``__init__`` of sglang's ``AiterAttnBackend`` and
``AiterMultiStepDraftBackend`` -- and of the plugin's subclasses, whatever they define -- with
recording stand-ins. The multi-step stand-in builds its ``speculative_num_steps - 1`` per-step
children the way sglang's does: by calling the name ``AiterAttnBackend`` looked up in the
``aiter_backend`` module at that moment.
"""

from __future__ import annotations

import importlib
from typing import Any

import pytest

__all__ = ["install"]

AITER_MODULE = "sglang.srt.layers.attention.aiter_backend"


def _attn_init(self: Any, model_runner: Any, *args: Any, **kwargs: Any) -> None:
    self.double_args = (model_runner, args, kwargs)


def _multi_step_init(self: Any, model_runner: Any, topk: int, speculative_num_steps: int) -> None:
    module: Any = importlib.import_module(AITER_MODULE)
    self.topk = topk
    self.speculative_num_steps = speculative_num_steps
    self.attn_backends = [
        module.AiterAttnBackend(model_runner, skip_prefill=True, topk=topk)
        for _ in range(speculative_num_steps - 1)
    ]


def install(monkeypatch: pytest.MonkeyPatch) -> None:
    from sglang_aiter_plugin.backend import backend_classes

    module: Any = importlib.import_module(AITER_MODULE)
    ext_attn, ext_multi = backend_classes()
    for cls in (module.AiterAttnBackend, ext_attn):
        monkeypatch.setattr(cls, "__init__", _attn_init)
    for cls in (module.AiterMultiStepDraftBackend, ext_multi):
        monkeypatch.setattr(cls, "__init__", _multi_step_init)
