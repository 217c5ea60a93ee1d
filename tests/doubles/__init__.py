"""Test doubles, all in one place, for what cannot exist on a machine without ROCm or a server.

Only these are doubles: aiter's kernels and communicator (``aiter_constructors``), the one name
sglang's aiter backend binds only beside aiter (``aiter_backend_imports``), the handful of
model-runner attributes a backend reads (``model_runner``), and the ROCm host itself
(``rocm_platform``; ``aiter_triton`` stands in for it so that aiter's real Triton
``unified_attention`` loads without ROCm). sglang itself is always the real release under test.
One module per double.
"""
