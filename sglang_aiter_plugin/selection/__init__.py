"""How ``--attention-backend aiter-ext`` becomes sglang's ``aiter`` plus the plugin's classes.

sglang tests the literal name ``"aiter"`` in dozens of places (memory fraction, model validation,
MLA dispatch, draft factories, the backend stamp model code reads back). Rather than follow each of
them, the plugin *folds* ``aiter-ext`` into ``aiter`` before sglang's resolution reads any of
them (:mod:`.fold`), records the choice on the server-arguments record and in the environment
(:mod:`.marker`), and lets sglang's own ``aiter`` construction sites build the plugin's classes
when, and only when, that choice is recorded (:mod:`.factories`).
"""

from __future__ import annotations

from sglang_aiter_plugin.selection.factories import (
    CONSTRUCTION_SITES,
    install_draft_factories,
    install_registry,
)
from sglang_aiter_plugin.selection.fold import (
    BACKEND_FIELDS,
    ParityError,
    fold_point,
    install_fold,
)
from sglang_aiter_plugin.selection.marker import (
    EXT_NAME,
    MARKER_ATTR,
    SELECTED_ENV,
    STOCK_NAME,
    is_selected,
)

__all__ = [
    "BACKEND_FIELDS",
    "CONSTRUCTION_SITES",
    "EXT_NAME",
    "MARKER_ATTR",
    "SELECTED_ENV",
    "STOCK_NAME",
    "ParityError",
    "fold_point",
    "install_draft_factories",
    "install_fold",
    "install_registry",
    "is_selected",
]
