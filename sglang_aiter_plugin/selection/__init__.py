"""Choosing ``--attention-backend aiter-ext`` at launch: the ``attention-backend`` fix.

sglang tests the literal name ``"aiter"`` in dozens of places, so the fix *folds* ``aiter-ext``
into ``aiter`` before sglang's resolution reads any of them and records the choice
(:mod:`.choice`), then lets sglang's own ``aiter`` construction sites build the plugin's classes
(:mod:`sglang_aiter_plugin.backend.classes`) when, and only when, that choice is recorded
(:mod:`.sites`, which also lists every sglang symbol touched). The pluggy plugin, its ledger and
its two import-time steps are :mod:`.fix`.
"""
