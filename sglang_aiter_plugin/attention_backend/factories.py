"""Build the plugin's classes at sglang's own ``aiter`` construction sites -- only when chosen.

sglang constructs its aiter backend classes at the construction sites of
:data:`~.targets.TARGETS` (pinned per release by the canary audit in
``tests/attention_backend/audit``). Each site imports the class from
``sglang.srt.layers.attention.aiter_backend`` when it runs. The plugin wraps the three factory
functions; when the record (or the environment) says ``aiter-ext`` was chosen, the wrapper runs a
copy of sglang's own function in which that import yields the plugin's subclass
(:func:`sglang_aiter_plugin._rebind.rebound`). sglang's arguments, stamps (``"aiter"``) and
wrappers stay sglang's; ``isinstance(..., AiterMultiStepDraftBackend)`` still holds. Without the
choice the stock function runs untouched. ``require_aiter()`` runs first, so a machine without
ROCm fails there with the message naming ROCm and aiter.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import ModuleType
from typing import Any

from sglang_aiter_plugin._errors import AiterExtError
from sglang_aiter_plugin.attention_backend import marker
from sglang_aiter_plugin.attention_backend.targets import (
    AITER_MODULE,
    CONSTRUCTION_SITES,
    DRAFT_UTILS_MODULE,
    TARGETS,
)

__all__ = [
    "CONSTRUCTION_SITES",
    "UnfoldedSelectionError",
    "build_plugin_classes",
    "install_draft_factories",
    "install_registry",
]

#: The ``DraftBackendFactory`` methods among the construction sites.
DRAFT_FACTORY_METHODS = tuple(
    t.qualname.split(".")[1] for t in TARGETS
    if t.module == DRAFT_UTILS_MODULE and t.qualname.startswith("DraftBackendFactory.")
)
_WRAPPED_FLAG = "__sglang_aiter_plugin_factory__"


class UnfoldedSelectionError(AiterExtError, RuntimeError):
    """``aiter-ext`` reached the model runner without having been resolved as ``aiter``."""


def _plugin_classes() -> dict[str, type[Any]]:
    from sglang_aiter_plugin.backend import backend_classes

    attn_cls, multi_cls = backend_classes()
    return {"AiterAttnBackend": attn_cls, "AiterMultiStepDraftBackend": multi_cls}


def build_plugin_classes(fn: Callable[..., Any], builds: str, *args: Any, **kwargs: Any) -> Any:
    """Run sglang's construction function ``fn`` so that the ``builds`` class it imports is ours."""
    from sglang_aiter_plugin._rebind import rebound
    from sglang_aiter_plugin.backend._availability import require_aiter

    require_aiter()
    cls = _plugin_classes()[builds]
    return rebound(fn, {builds: cls}, module=AITER_MODULE)(*args, **kwargs)


def _selecting(
    original: Callable[..., Any], builds: str, record_of: Callable[..., Any]
) -> Callable[..., Any]:
    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if marker.is_selected(record_of(*args)):
            return build_plugin_classes(original, builds, *args, **kwargs)
        return original(*args, **kwargs)

    setattr(wrapper, _WRAPPED_FLAG, True)
    return wrapper


def _builds(module: str, qualname: str) -> str:
    (target,) = [t for t in TARGETS if t.module == module and t.qualname == qualname]
    assert target.builds is not None
    return target.builds


def _runner_record(runner: Any, *_: Any) -> Any:
    return getattr(runner, "server_args", None)


def _draft_record(factory: Any, *_: Any) -> Any:
    return getattr(getattr(factory, "draft_model_runner", None), "server_args", None)


def unfolded_backend(runner: Any) -> Any:
    """``ATTENTION_BACKENDS['aiter-ext']``: reached only when the fold did not run."""
    from sglang_aiter_plugin.backend._availability import require_aiter

    require_aiter()
    raise UnfoldedSelectionError(
        "attention backend 'aiter-ext' reached the model runner without being resolved as "
        "'aiter', so sglang's aiter-specific configuration was skipped. The server arguments "
        "were resolved before sglang loaded plugins (HttpServerEngineAdapter, benchmark "
        "scripts, a hand-built ServerArgs). Launch with `python -m sglang.launch_server`, "
        "`sglang serve` or `sglang.Engine(...)`, or call sglang.srt.plugins.load_plugins() "
        "before building ServerArgs."
    )


def install_registry(registry: ModuleType) -> None:
    """Wrap ``ATTENTION_BACKENDS['aiter']``; make ``'aiter-ext'`` a fail-fast entry."""
    backends: dict[str, Any] = registry.ATTENTION_BACKENDS
    current = backends[marker.STOCK_NAME]
    if not getattr(current, _WRAPPED_FLAG, False):
        builds = _builds(registry.__name__, f"ATTENTION_BACKENDS[{marker.STOCK_NAME!r}]")
        backends[marker.STOCK_NAME] = _selecting(current, builds, _runner_record)
    if backends.get(marker.EXT_NAME) is not unfolded_backend:
        registry.register_attention_backend(marker.EXT_NAME)(unfolded_backend)


def install_draft_factories(draft_utils: ModuleType) -> None:
    """Wrap the two aiter methods of ``DraftBackendFactory``."""
    factory_cls = draft_utils.DraftBackendFactory
    for name in DRAFT_FACTORY_METHODS:
        current = getattr(factory_cls, name)
        if not getattr(current, _WRAPPED_FLAG, False):
            builds = _builds(DRAFT_UTILS_MODULE, f"DraftBackendFactory.{name}")
            setattr(factory_cls, name, _selecting(current, builds, _draft_record))
