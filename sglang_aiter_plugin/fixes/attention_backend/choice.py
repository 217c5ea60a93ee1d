"""Choosing ``aiter-ext``: fold it into ``aiter`` at the entry of resolution, record the choice.

The choice travels, only when made, as :data:`MARKER_ATTR` on the ``ServerArgs`` record (pickled
to schedulers and draft workers) and as :data:`SELECTED_ENV` (``1``, inherited by ``spawn``
children); the record wins when it carries the attribute.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable
from types import ModuleType
from typing import Any

from sglang_aiter_plugin._errors import AiterExtError, shorten
from sglang_aiter_plugin._log import log
from sglang_aiter_plugin._patch import wrap_once

__all__ = ["BACKEND_FIELDS", "EXT_NAME", "MARKER_ATTR", "PATCH", "SELECTED_ENV", "STOCK_NAME",
           "BackendChoiceError", "SelectionError", "fold", "fold_point", "install_fold",
           "is_selected", "record"]

EXT_NAME = "aiter-ext"
STOCK_NAME = "aiter"
MARKER_ATTR = "_aiter_ext_impl"
SELECTED_ENV = "SGLANG_AITER_EXT_SELECTED"


class SelectionError(AiterExtError, ValueError):
    """The recorded choice of backend class cannot be read."""


def record(server_args: Any, selected: bool) -> None:
    """Record the choice of ``aiter-ext`` on ``server_args`` and in the environment. Without it
    nothing is written on the record, and a :data:`SELECTED_ENV` left by an earlier launch (in
    this process, or inherited) is removed so it cannot turn this launch's ``aiter`` into ours."""
    if selected:
        setattr(server_args, MARKER_ATTR, EXT_NAME)
        os.environ[SELECTED_ENV] = "1"
    else:
        os.environ.pop(SELECTED_ENV, None)


def is_selected(server_args: Any | None) -> bool:
    """Whether the plugin's classes should stand in for sglang's ``aiter`` classes."""
    value = getattr(server_args, MARKER_ATTR, None)  # None without a record
    if value is not None:
        return bool(value == EXT_NAME)
    value = os.environ.get(SELECTED_ENV, "0")
    if value not in ("0", "1"):
        raise SelectionError(
            f"{SELECTED_ENV}={shorten(value)} is not valid; accepted values: 0, 1. The plugin "
            "writes it when it resolves the launch arguments (it is not a switch): unset it, and "
            "choose the backend with --attention-backend aiter or aiter-ext.")
    return value == "1"


BACKEND_FIELDS = ("attention_backend", "prefill_attention_backend", "decode_attention_backend",
                  "speculative_draft_attention_backend")
SOURCE = "sglang_aiter_plugin"
PATCH = "fold"


class BackendChoiceError(AiterExtError, ValueError):
    """A launch that selects ``aiter-ext`` in a way the plugin cannot make behave like ``aiter``."""


def fold_point(server_args_cls: type[Any]) -> str:
    """The ``ServerArgs`` method whose entry is the fold point in the installed release: where
    every entry point passes before the first backend name is read."""
    return "resolve_once" if hasattr(server_args_cls, "resolve_once") else "__post_init__"


def _check(server_args: Any, folded: list[str], named: dict[str, str]) -> None:
    stock = sorted(f for f, v in named.items() if v == STOCK_NAME)
    if stock:
        raise BackendChoiceError(
            f"attention backends mix 'aiter-ext' ({', '.join(folded)}) with 'aiter' "
            f"({', '.join(stock)}); sglang-aiter-plugin builds one class for every aiter backend "
            "of a server. Choose 'aiter-ext' for all of them, or 'aiter' for all of them.")
    if getattr(server_args, "use_ray", False):
        raise BackendChoiceError(
            "--attention-backend aiter-ext cannot be used with --use-ray: sglang's Ray scheduler "
            "actors never load plugins, so they would build stock 'aiter' silently. Drop "
            "--use-ray, or use --attention-backend aiter.")


def fold(server_args: Any, *, declare: bool) -> list[str]:
    """Resolve every backend field naming ``aiter-ext`` as ``aiter`` (``declare``: through sglang's
    ``declare_resolution``, 0.5.19+, so ``launch_command`` keeps ``aiter-ext``; else by writing
    the fields) after the guards, and record the choice; return the folded field names (empty
    when ``aiter-ext`` was not chosen)."""
    named = {f: v for f in BACKEND_FIELDS if isinstance(v := getattr(server_args, f, None), str)}
    folded = sorted(f for f, v in named.items() if v == EXT_NAME)
    if folded:
        from sglang_aiter_plugin import backend

        # before sglang detects devices or loads anything; the message names the flag typed
        backend.require_aiter(f"--{folded[0].replace('_', '-')}", host_only=True)
        _check(server_args, folded, named)
        if declare:
            from sglang.srt.arg_groups.overrides import declare_resolution

            declare_resolution(server_args, SOURCE, **dict.fromkeys(folded, STOCK_NAME))
        else:
            for name in folded:
                setattr(server_args, name, STOCK_NAME)
        log(logging.INFO, "sglang-aiter-plugin: resolving %s 'aiter-ext' as 'aiter' (sglang's "
            "aiter configuration, validation and runtime paths); sglang's aiter backends will be "
            "built as the plugin's aiter-ext classes", ", ".join(folded))
    record(server_args, selected=bool(folded))
    return folded


def _wrap(original: Callable[..., Any], *, declare: bool,
          then: Callable[[bool], None]) -> Callable[..., Any]:
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        # A finished (or failed) record is not resolved again; the original decides what to do.
        if not (getattr(self, "_resolution_finished", False)
                or getattr(self, "_resolution_failed", False)):
            then(bool(fold(self, declare=declare)))
        return original(self, *args, **kwargs)

    return wrapper


def install_fold(server_args: ModuleType, then: Callable[[bool], None]) -> None:
    """On ``sglang.srt.server_args``, once: wrap the release's fold point on ``ServerArgs`` (each
    resolution then calls ``then(selected)`` with its recorded choice) and add ``aiter-ext`` to the
    shared choices list, in place (from 0.5.20 rebinding the name has no effect)."""
    cls = server_args.ServerArgs
    point = fold_point(cls)
    if wrap_once(cls, point, PATCH, functools.partial(
            _wrap, declare=point == "resolve_once", then=then)):
        choices: list[str] = server_args.ATTENTION_BACKEND_CHOICES
        choices.append(EXT_NAME)
