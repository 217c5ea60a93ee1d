"""Choosing ``--attention-backend aiter-ext`` at launch: the ``attention-backend`` fix (:mod:`.fix`,
its ledger and its two steps: :mod:`.choice`, then :mod:`.sites`)."""
