"""Choosing ``--attention-backend aiter-ext`` at launch: the ``attention-backend`` fix.

:mod:`.choice` folds ``aiter-ext`` into ``aiter`` before sglang reads it and records the choice;
:mod:`.sites` makes sglang's ``aiter`` construction sites build the plugin's classes when it is
recorded; :mod:`.fix` is the pluggy plugin, its ledger and its two import-time steps.
"""
