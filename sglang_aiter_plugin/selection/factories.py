"""Build the plugin's classes at sglang's own ``aiter`` construction sites -- only when chosen.

sglang constructs its aiter backend classes in exactly these places in 0.5.11-0.5.23 (pinned by
the canary audit in ``tests/fixes/audit``):

* ``attention_registry.create_aiter_backend`` (the ``ATTENTION_BACKENDS['aiter']`` factory),
* ``DraftBackendFactory._create_aiter_prefill_backend`` (EAGLE/MTP draft extend),
* ``DraftBackendFactory._create_aiter_decode_backend`` (multi-step draft decode), whose
  ``AiterMultiStepDraftBackend.__init__`` builds its per-step ``AiterAttnBackend`` children
  through a module-global name.

Each of them imports the class from ``sglang.srt.layers.attention.aiter_backend`` when it runs.
The plugin wraps the three functions; when the record (or the environment) says ``aiter-ext``
was chosen, the wrapper calls sglang's own function with those two module names bound to the
plugin's subclasses for the duration of the call. sglang's arguments, stamps (``"aiter"``) and
wrappers stay sglang's; ``isinstance(..., AiterMultiStepDraftBackend)`` still holds. Without the
choice the stock function runs untouched. ``require_aiter()`` runs first, so a machine without
ROCm fails there with the message naming ROCm and aiter.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

from sglang_aiter_plugin.selection import marker

__all__ = [
    "AITER_MODULE",
    "CONSTRUCTION_SITES",
    "UnfoldedSelectionError",
    "build_plugin_classes",
    "install_draft_factories",
    "install_registry",
    "plugin_classes_bound",
]

AITER_MODULE = "sglang.srt.layers.attention.aiter_backend"
DRAFT_FACTORY_METHODS = ("_create_aiter_prefill_backend", "_create_aiter_decode_backend")
# (module, qualified name) of every function that constructs an aiter backend class.
CONSTRUCTION_SITES = frozenset(
    {
        ("sglang.srt.layers.attention.attention_registry", "create_aiter_backend"),
        ("sglang.srt.speculative.draft_utils", "DraftBackendFactory._create_aiter_prefill_backend"),
        ("sglang.srt.speculative.draft_utils", "DraftBackendFactory._create_aiter_decode_backend"),
        (AITER_MODULE, "AiterMultiStepDraftBackend.__init__"),
    }
)
_WRAPPED_FLAG = "__sglang_aiter_plugin_factory__"
_bind_lock = threading.RLock()


class UnfoldedSelectionError(RuntimeError):
    """``aiter-ext`` reached the model runner without having been resolved as ``aiter``."""


@contextlib.contextmanager
def plugin_classes_bound() -> Iterator[tuple[type[Any], type[Any]]]:
    """Bind ``AiterAttnBackend``/``AiterMultiStepDraftBackend`` to the plugin's classes."""
    import importlib

    from sglang_aiter_plugin.backend import backend_classes

    attn_cls, multi_cls = backend_classes()  # imported (subclassing the stock classes) first
    module: Any = importlib.import_module(AITER_MODULE)
    with _bind_lock:
        saved = module.AiterAttnBackend, module.AiterMultiStepDraftBackend
        module.AiterAttnBackend, module.AiterMultiStepDraftBackend = attn_cls, multi_cls
        try:
            yield attn_cls, multi_cls
        finally:
            module.AiterAttnBackend, module.AiterMultiStepDraftBackend = saved


def build_plugin_classes(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run sglang's construction function ``fn`` so that it builds the plugin's classes."""
    from sglang_aiter_plugin.backend._availability import require_aiter

    require_aiter()
    with plugin_classes_bound():
        return fn(*args, **kwargs)


def _selecting(original: Callable[..., Any], record_of: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if marker.is_selected(record_of(*args)):
            return build_plugin_classes(original, *args, **kwargs)
        return original(*args, **kwargs)

    setattr(wrapper, _WRAPPED_FLAG, True)
    return wrapper


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
        backends[marker.STOCK_NAME] = _selecting(current, _runner_record)
    if backends.get(marker.EXT_NAME) is not unfolded_backend:
        registry.register_attention_backend(marker.EXT_NAME)(unfolded_backend)


def install_draft_factories(draft_utils: ModuleType) -> None:
    """Wrap the two aiter methods of ``DraftBackendFactory``."""
    factory_cls = draft_utils.DraftBackendFactory
    for name in DRAFT_FACTORY_METHODS:
        current = getattr(factory_cls, name)
        if not getattr(current, _WRAPPED_FLAG, False):
            setattr(factory_cls, name, _selecting(current, _draft_record))
