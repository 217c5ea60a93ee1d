"""sglang's ``aiter`` construction sites, and which class each builds once ``aiter-ext`` is chosen.

When :func:`~.choice.is_selected` says ``aiter-ext`` was chosen, the wrapper of each site runs a
copy of sglang's function (:func:`~sglang_aiter_plugin._rebind.rebound`) in which its import of
sglang's aiter class yields the plugin's subclass named in :data:`PLUGIN_CLASSES`; otherwise the
stock function runs. The fix's ledger (:mod:`.fix`) lists every sglang symbol the fix touches.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

from sglang_aiter_plugin._errors import AiterExtError
from sglang_aiter_plugin._patch import wrap_once
from sglang_aiter_plugin._rebind import rebound
from sglang_aiter_plugin.fixes.attention_backend.choice import EXT_NAME, STOCK_NAME, is_selected

__all__ = ["AITER_BACKEND_MODULE", "DRAFT_FACTORY_SITES", "DRAFT_UTILS_MODULE", "PATCH",
           "PLUGIN_CLASSES", "UnfoldedSelectionError", "install_construction_sites", "plugin_class"]

DRAFT_UTILS_MODULE = "sglang.srt.speculative.draft_utils"
AITER_BACKEND_MODULE = "sglang.srt.layers.attention.aiter_backend"

#: sglang's class a construction site imports -> the plugin's class it builds instead.
PLUGIN_CLASSES = {"AiterAttnBackend": "AiterExtAttnBackend",
                  "AiterMultiStepDraftBackend": "AiterExtMultiStepDraftBackend"}

#: The ``DraftBackendFactory`` methods that build an aiter class -> the class each builds. The
#: other sites: ``ATTENTION_BACKENDS['aiter']`` builds ``AiterAttnBackend``, and so does
#: ``AiterMultiStepDraftBackend.__init__``, which the plugin's draft class runs as a copy.
DRAFT_FACTORY_SITES = {"_create_aiter_prefill_backend": "AiterAttnBackend",
                       "_create_aiter_decode_backend": "AiterMultiStepDraftBackend"}

PATCH = "construction-site"


class UnfoldedSelectionError(AiterExtError, RuntimeError):
    """``aiter-ext`` reached the model runner without having been resolved as ``aiter``."""


def _selecting(original: Callable[..., Any], builds: str,
               record_of: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not is_selected(record_of(*args)):
            return original(*args, **kwargs)
        from sglang_aiter_plugin import backend

        backend.require_aiter()  # first: without ROCm the message names ROCm and aiter
        return rebound(original, {builds: plugin_class(builds)}, module=AITER_BACKEND_MODULE)(
            *args, **kwargs)

    return wrapper


def plugin_class(builds: str) -> type:
    """The plugin's class built where sglang builds its aiter class ``builds`` (importing
    :mod:`sglang_aiter_plugin.backend.classes`, which imports sglang's ``aiter_backend``)."""
    classes = importlib.import_module("sglang_aiter_plugin.backend.classes")
    cls: type = getattr(classes, PLUGIN_CLASSES[builds])
    return cls


def _runner_record(runner: Any, *_: Any) -> Any:
    return getattr(runner, "server_args", None)


def _draft_record(factory: Any, *_: Any) -> Any:
    return getattr(getattr(factory, "draft_model_runner", None), "server_args", None)


def unfolded_backend(runner: Any) -> Any:
    """``ATTENTION_BACKENDS['aiter-ext']``: reached only when the fold did not run."""
    from sglang_aiter_plugin import backend

    backend.require_aiter()
    raise UnfoldedSelectionError(
        "attention backend 'aiter-ext' reached the model runner without being resolved as "
        "'aiter', so sglang's aiter-specific configuration was skipped. The server arguments "
        "were resolved before sglang loaded plugins (HttpServerEngineAdapter, benchmark "
        "scripts, a hand-built ServerArgs). Launch with `python -m sglang.launch_server`, "
        "`sglang serve` or `sglang.Engine(...)`, or call sglang.srt.plugins.load_plugins() "
        "before building ServerArgs.")


def install_construction_sites(registry: ModuleType) -> None:
    """Wrap sglang's construction sites once: ``ATTENTION_BACKENDS['aiter']`` and the
    ``DraftBackendFactory`` aiter methods; make ``'aiter-ext'`` a fail-fast registry entry."""
    backends: dict[str, Any] = registry.ATTENTION_BACKENDS
    factory = importlib.import_module(DRAFT_UTILS_MODULE).DraftBackendFactory
    wrap_once(backends, STOCK_NAME, PATCH, functools.partial(
        _selecting, builds="AiterAttnBackend", record_of=_runner_record), item=True)
    for method, builds in DRAFT_FACTORY_SITES.items():
        wrap_once(factory, method, PATCH, functools.partial(
            _selecting, builds=builds, record_of=_draft_record))
    if backends.get(EXT_NAME) is not unfolded_backend:
        registry.register_attention_backend(EXT_NAME)(unfolded_backend)
