"""The ``attention-backend`` fix: how ``--attention-backend aiter-ext`` becomes sglang's ``aiter``.

sglang tests the literal name ``"aiter"`` in dozens of places (memory fraction, model validation,
MLA dispatch, draft factories, the backend stamp model code reads back). Rather than follow each of
them, the fix *folds* ``aiter-ext`` into ``aiter`` before sglang's resolution reads any of them
(:mod:`.fold`), records the choice beside the configuration (:mod:`.marker`), and lets sglang's own
``aiter`` construction sites build the plugin's classes when, and only when, that choice is
recorded (:mod:`.factories`). Every sglang symbol it touches is in :mod:`.targets`; the pluggy
plugin with its ledger is :mod:`.fix`.
"""

from __future__ import annotations

from sglang_aiter_plugin.attention_backend.fold import (
    BACKEND_FIELDS,
    BackendChoiceError,
    fold_point,
    install_fold,
)
from sglang_aiter_plugin.attention_backend.marker import (
    EXT_NAME,
    MARKER_ATTR,
    SELECTED_ENV,
    STOCK_NAME,
    is_selected,
)
from sglang_aiter_plugin.attention_backend.targets import CONSTRUCTION_SITES, TARGETS

__all__ = [
    "BACKEND_FIELDS",
    "CONSTRUCTION_SITES",
    "EXT_NAME",
    "MARKER_ATTR",
    "SELECTED_ENV",
    "STOCK_NAME",
    "TARGETS",
    "BackendChoiceError",
    "fold_point",
    "install_fold",
    "is_selected",
]
