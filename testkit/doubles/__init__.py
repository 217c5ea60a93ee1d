"""Test doubles, all in one place, for what cannot exist on a machine without ROCm or a server.

sglang itself is always the real release under test. One module per double, each listed in
:data:`DOUBLES` with what it stands in for (a test keeps this list complete).
"""

from __future__ import annotations

__all__ = ["DOUBLES"]

DOUBLES: dict[str, str] = {
    "aiter_backend_imports": "the one name sglang's aiter backend binds only beside aiter "
    "(reset_verify_attn_plan_cache, 0.5.20+)",
    "aiter_gpu_kernels": "aiter's compiled decode and extend kernels on a CUDA GPU: capture-safe "
    "Triton references with aiter's per-row memory contract",
    "aiter_kernels": "the ROCm aiter package inside a real server: torch reference decode and "
    "extend kernels with aiter's per-row contract, paged and (on CPU) MLA (or aiter's real "
    "Triton unified_attention), every other name refusing",
    "aiter_mla": "aiter's mla.py memory contract on CPU: the lru-cached split table that frees "
    "on eviction, the two stages, a captured graph reading the table without owning it",
    "aiter_mla_gpu": "aiter's own mla.py loaded on a CUDA GPU, its HIP assembly stage 1 a "
    "capture-safe torch double (and the ROCm host answers mla.py imports)",
    "aiter_mla_persistent": "aiter's persistent MLA decode (the fp8 KV path): the HIP schedule "
    "metadata (sizes and contents), the persistent stage 1 and mla_reduce_v1, as torch",
    "aiter_triton": "the ROCm side of aiter's package, so that aiter's real Triton "
    "unified_attention loads without ROCm (stub parent packages, a HIP target while aiter's "
    "arch detection imports)",
    "atom_plugin": "ROCm/ATOM's sglang plugin on the symbols the plugin wraps (GroupCoordinator."
    "graph_capture entering aiter's own group's capture, the decode per-shape capture), as a "
    "test-only entry-point plugin beside a ROCm-host one",
    "bare_model_runner": "a model runner that carries only its server arguments",
    "communicator": "aiter's custom all-reduce communicator (ROCm/aiter e4048607), recording what "
    "it is asked (CPU)",
    "future_collectives": "collective methods as a future sglang might write them (honouring "
    "every switch, with a changed signature, or calling aiter's further fused collectives)",
    "mhc_kernel": "the JIT HIP kernel behind sglang's all_reduce_mhc_post and the aiter modules "
    "its file imports, recording each launch",
    "reducing_communicator": "aiter's communicator doing real collectives on the stream (GPU)",
    "rocm_platform": "the ROCm host itself (sglang's platform answers, not torch's)",
    "server_plugin": "a test-only sglang plugin installing the server doubles in every process "
    "a real server starts (aiter kernels, the plugin's ROCm host answer, sglang's missing CPU "
    "fill value; on a GPU aiter's own mla.py, the dual-GEMM import stand-in, the graph-replay "
    "recorder and the sgl_kernel stub's version metadata)",
    "short_buffer": "a regression in aiter-ext's own buffers: one named buffer cut one batch "
    "row short of its pool's capacity",
}
