"""``sglang-aiter-plugin selftest``: ``aiter-ext`` against upstream ``aiter`` on this GPU, with the
installed sglang and aiter, no model weights and no network.

Each case (:mod:`.cases`) builds both backends through sglang's own configuration
(:mod:`.sglang_setup`, :mod:`.model_runner`) with a request pool below the batches sglang sends,
runs sglang's metadata code and aiter's kernels on decode graphs and eager batches
(:mod:`.decode_batch`, :mod:`.mlp_sync`) and compares every real row with a torch reference
(:mod:`.reference`), one verdict per case (:mod:`.checks`), in a worker process per backend that
imports sglang once (:mod:`.child`, :mod:`.run`); :mod:`.report` prints the outcome. With sglang
server arguments, :mod:`.deployment` builds the cases the operator's own configuration takes
instead. The tests and GPU scripts use the same modules.

Nothing here runs at import: no module imports torch or sglang before it is called, and loading
the plugin never imports this package.
"""
