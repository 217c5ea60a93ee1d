"""Test doubles, all in one place, for what cannot exist on a machine without ROCm or a server.

Only these are doubles: aiter's kernels (``aiter_constructors``), aiter's communicator
(``communicator`` records calls on CPU, ``reducing_communicator`` runs real collectives on a
GPU), the one name sglang's aiter backend binds only beside aiter (``aiter_backend_imports``), the
handful of model-runner attributes a backend reads (``model_runner``), collective methods as a
future sglang might write them (``future_collectives``), and the ROCm host itself
(``rocm_platform``). sglang itself is always the real release under test. One module per double.
"""
