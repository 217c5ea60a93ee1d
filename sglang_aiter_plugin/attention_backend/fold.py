"""Fold ``aiter-ext`` into ``aiter`` before sglang's resolution reads a single backend name.

Where the fold runs, per release (every entry point -- ``launch_server``, ``sglang serve``,
``Engine(**kwargs)``, ``Engine(server_args=...)`` -- goes through it):

* **0.5.19 and later**: ``ServerArgs.resolve_once`` is the one gate every process passes before
  ``run_resolution_pipeline``. The wrapper declares ``attention_backend='aiter'`` (etc.) with
  sglang's own ``declare_resolution``, the way sglang folds its deprecated backend aliases; the
  pipeline keeps declarations made before it starts, and it records the raw input first, so
  ``launch_command`` still shows ``aiter-ext``. sglang's ``register_resolution_hook`` (0.5.20+)
  was not used: its first step is a different function in 0.5.20, 0.5.21 and 0.5.22+, and 0.5.19
  has no such API, whereas ``resolve_once`` is the same gate in all five releases.
* **0.5.11 to 0.5.18**: resolution *is* ``ServerArgs.__post_init__`` (``_handle_*`` methods;
  0.5.15+ reset ``_resolved_overrides`` as its first statement, so a declaration made earlier
  would be dropped). The wrapper writes the fields before the original ``__post_init__`` runs,
  which is what those releases' own handlers do with a field; no ``_handle_*`` step runs first.

Either way the first code that reads a backend name already sees ``aiter``. Guards run at the
same point: a machine that cannot run aiter (no ROCm torch, no aiter package) stops with the
plugin's ``AiterUnavailableError``, before sglang detects devices or loads weights, and a launch
the plugin cannot make behave like ``aiter`` stops with a :class:`BackendChoiceError`; both name
the way out.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from sglang_aiter_plugin._errors import AiterExtError
from sglang_aiter_plugin._log import log
from sglang_aiter_plugin.attention_backend import marker

__all__ = ["BACKEND_FIELDS", "BackendChoiceError", "fold", "fold_point", "install_fold"]


BACKEND_FIELDS = (
    "attention_backend",
    "prefill_attention_backend",
    "decode_attention_backend",
    "speculative_draft_attention_backend",
)
SOURCE = "sglang_aiter_plugin"
_WRAPPED_FLAG = "__sglang_aiter_plugin_fold__"


class BackendChoiceError(AiterExtError, ValueError):
    """A launch that selects ``aiter-ext`` in a way the plugin cannot make behave like ``aiter``."""


def fold_point(server_args_cls: type[Any]) -> str:
    """The ``ServerArgs`` method whose entry is the fold point in the installed release."""
    return "resolve_once" if hasattr(server_args_cls, "resolve_once") else "__post_init__"


def _check(server_args: Any, named: dict[str, str]) -> None:
    ext = sorted(f for f, v in named.items() if v == marker.EXT_NAME)
    stock = sorted(f for f, v in named.items() if v == marker.STOCK_NAME)
    if stock:
        raise BackendChoiceError(
            f"attention backends mix 'aiter-ext' ({', '.join(ext)}) with 'aiter' "
            f"({', '.join(stock)}); sglang-aiter-plugin builds one class for every aiter backend "
            "of a server. Choose 'aiter-ext' for all of them, or 'aiter' for all of them."
        )
    if getattr(server_args, "use_ray", False):
        raise BackendChoiceError(
            "--attention-backend aiter-ext cannot be used with --use-ray: sglang's Ray scheduler "
            "actors never load plugins, so they would build stock 'aiter' silently. Drop "
            "--use-ray, or use --attention-backend aiter."
        )


def fold(server_args: Any, *, declare: bool) -> list[str]:
    """Resolve every backend field naming ``aiter-ext`` as ``aiter``; record the choice.

    ``declare`` selects sglang's ``declare_resolution`` (0.5.19+) over writing the fields
    (0.5.11-0.5.18). Returns the folded field names (empty when ``aiter-ext`` was not chosen).
    """
    named = {
        f: v for f in BACKEND_FIELDS if isinstance(v := getattr(server_args, f, None), str)
    }
    folded = sorted(f for f, v in named.items() if v == marker.EXT_NAME)
    if folded:
        from sglang_aiter_plugin.backend._availability import require_rocm_host

        # before sglang detects devices or loads anything; the message names the flag typed
        require_rocm_host(f"--{folded[0].replace('_', '-')}")
        _check(server_args, named)
        renamed = dict.fromkeys(folded, marker.STOCK_NAME)
        if declare:
            from sglang.srt.arg_groups.overrides import declare_resolution

            declare_resolution(server_args, SOURCE, **renamed)
        else:
            for name, value in renamed.items():
                setattr(server_args, name, value)
        log(
            logging.INFO,
            "sglang-aiter-plugin: resolving %s 'aiter-ext' as 'aiter' (sglang's aiter "
            "configuration, validation and runtime paths); sglang's aiter backends will be "
            "built as the plugin's aiter-ext classes",
            ", ".join(folded),
        )
    marker.record(server_args, selected=bool(folded))
    return folded


def _wrap(original: Callable[..., Any], *, declare: bool) -> Callable[..., Any]:
    @functools.wraps(original)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        # A finished (or failed) record is not resolved again; the original decides what to do.
        if not (
            getattr(self, "_resolution_finished", False)
            or getattr(self, "_resolution_failed", False)
        ):
            fold(self, declare=declare)
        return original(self, *args, **kwargs)

    setattr(wrapper, _WRAPPED_FLAG, True)
    return wrapper


def install_fold(server_args_cls: type[Any]) -> str:
    """Wrap the release's fold point on ``ServerArgs`` once; return its name."""
    point = fold_point(server_args_cls)
    current = getattr(server_args_cls, point)
    if not getattr(current, _WRAPPED_FLAG, False):
        setattr(server_args_cls, point, _wrap(current, declare=point == "resolve_once"))
    return point
