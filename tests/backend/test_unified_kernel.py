"""aiter's real Triton ``unified_attention`` behind sglang's backend, on CPU (interpreted).

The kernel comes from the ``amd-aiter`` wheel (a test dependency that ``tools/env.sh`` installs
into ``.venv/opt/amd-aiter``), loaded without ROCm by ``testkit.doubles.aiter_triton``. sglang is
configured as a scheduler would be (P = 33 requests, two-batch overlap, so graphs are captured up
to a batch of 34), with ``SGLANG_USE_AITER_UNIFIED_ATTN=1``, page size 16, a 512-token context
and fp16 (the interpreter computes bf16 ``tl.dot`` wrongly, triton-lang/triton#11584). Each
backend runs its unified decode at the padded batch of 34 rows (33 requests and one padding row,
as sglang pads) and then a unified extend batch, with its own metadata code and its own buffers.
``SentinelKernel`` runs each call with two sentinels after the ``cu_seqlens_q`` it was handed:
an output that changes with them means the kernel read past the end. Both backends run in
one fresh interpreter: ``TRITON_INTERPRET`` must be set before Triton is imported.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest

from testkit.doubles.aiter_triton import installed_tree, loaded
from testkit.subproc import run_python

TREE = installed_tree()
pytestmark = pytest.mark.skipif(
    TREE is None,
    reason="amd-aiter is not installed: bash tools/env.sh installs it into .venv/opt/amd-aiter",
)

def test_loading_the_kernel_leaves_sys_modules_and_triton_as_they_were() -> None:
    from triton.runtime import driver

    assert TREE is not None
    before = {k: v for k, v in sys.modules.items() if k.split(".")[0] == "aiter"}
    active = driver._active
    with loaded(TREE) as kernel:
        assert kernel.module.__name__ == "aiter.ops.triton.unified_attention"  # the 0.1.7 layout
        assert sys.modules["aiter"].__file__ is None  # a stub parent, not aiter/__init__.py
        assert sys.modules["aiter.jit"] is None  # aiter's ROCm JIT stays blocked
        assert driver._active is active  # the HIP target was only for the arch modules
    assert {k: v for k, v in sys.modules.items() if k.split(".")[0] == "aiter"} == before
    assert driver._active is active
    assert callable(kernel.unified_attention)


SCRIPT = """
import os, pathlib, tempfile, torch
os.environ["SGLANG_USE_AITER_UNIFIED_ATTN"] = "1"
from sglang_aiter_plugin.selftest.decode_batch import Batch, DecodeBatch
from testkit.sglang_setup import SCENARIOS, POOL, configure, write_model_dir
from sglang_aiter_plugin.selftest.reference import fill_paged_requests, make_layer, reference_rows
from testkit.unified_kernel import SentinelKernel
from testkit.doubles import aiter_backend_imports
from testkit.doubles.aiter_triton import installed_tree, loaded
from sglang.srt.layers.attention import aiter_backend
from sglang.srt.model_executor.forward_batch_info import ForwardMode

PAGE = 16
aiter_backend_imports.install(aiter_backend)
with loaded(installed_tree()) as kernel:
    probe = SentinelKernel(kernel.unified_attention)
aiter_backend.unified_attention = probe
model_dir = write_model_dir(pathlib.Path(tempfile.mkdtemp()) / "m")
setup = configure(model_dir, SCENARIOS["two-batch-overlap"],
                  ("--page-size", str(PAGE), "--dtype", "float16", "--context-length", "512"))


def run(kind):
    out = dict(origin=kernel.tree.origin, module=kernel.module.__name__, max_bs=setup.max_bs)
    fill_paged_requests(setup.runner, POOL, PAGE, seed=0)
    if kind == "aiter-ext":
        from sglang_aiter_plugin.backend.classes import AiterExtAttnBackend as cls
    else:
        cls = aiter_backend.AiterAttnBackend
    b = cls(setup.runner)
    out["unified"] = bool(getattr(b, "use_triton_unified_attention", False))
    out["unified_extend"] = hasattr(b, "_forward_extend_unified")  # 0.5.20+
    out["decode_buffer"] = (  # 0.5.12+: its own buffer; 0.5.11 reuses qo_indptr
        "qo_indptr_unified_decode" if hasattr(b, "qo_indptr_unified_decode") else "qo_indptr"
    )
    if not out["unified"]:
        return out
    b.init_cuda_graph_state(setup.max_bs, setup.max_bs)
    layer = make_layer(b)
    gen = torch.Generator().manual_seed(1)

    def check(call, q, reqs, visible):
        want = reference_rows(setup.runner, q, reqs, visible)
        got = call.out[: len(reqs)].float()
        err = (got - want).abs().flatten(1).amax(dim=1)
        return dict(call.as_record(), max_err=float(err.nan_to_num(float("inf")).max()),
                    rows_right=int((err < 5e-3).sum()))

    # Unified decode at the padded graph batch: P real requests and one padding row.
    bs = setup.max_bs
    reqs = torch.randperm(POOL, generator=gen).tolist()
    lens = torch.randint(1, 48, (POOL,), generator=gen).tolist()
    q = torch.randn(POOL, b.num_head, b.head_dim, generator=gen).half()
    batch = DecodeBatch(b, bs, "cpu")
    batch.fb.token_to_kv_pool = setup.runner.token_to_kv_pool  # 0.5.11 reads it from the batch
    batch.set(reqs, lens, q)
    batch.metadata(in_capture=False)
    batch.forward(layer)
    out["decode"] = check(probe.calls[-1], q, reqs, lens)

    # Unified extend after graph set-up: 3 requests, prefix 5/0/12, extend 7/3/9.
    if out["unified_extend"]:
        prefix, extend, ereqs = [5, 0, 12], [7, 3, 9], [3, 17, 30]
        seq = [p + e for p, e in zip(prefix, extend)]
        n = sum(extend)
        t = lambda xs, dt=torch.int64: torch.tensor(xs, dtype=dt)
        fb = Batch(
            batch_size=3, req_pool_indices=t(ereqs), seq_lens=t(seq), seq_lens_cpu=t(seq),
            seq_lens_sum=sum(seq), forward_mode=ForwardMode.EXTEND, spec_info=None,
            extend_prefix_lens=t(prefix, torch.int32), extend_prefix_lens_cpu=prefix,
            extend_seq_lens=t(extend, torch.int32), extend_seq_lens_cpu=extend,
            extend_start_loc=t([0, 7, 10], torch.int32), encoder_lens=None, out_cache_loc=None,
            input_ids=torch.zeros(n, dtype=torch.int64), positions=None, kv_loc_plan=None,
            attn_backend=b, mrope_positions=None, return_logprob=False, extend_num_tokens=n,
            extend_input_logprob_token_ids_gpu=None, capture_hidden_mode=None,
            padded_static_len=-1, num_token_non_padded=None, can_run_dp_cuda_graph=False,
        )
        eq = torch.randn(n, b.num_head, b.head_dim, generator=gen).half()
        b.init_forward_metadata(fb)
        b.forward_extend(eq.reshape(n, -1), None, None, layer, fb, save_kv_cache=False)
        rows_req = [r for r, e in zip(ereqs, extend) for _ in range(e)]
        visible = [p + i + 1 for p, e in zip(prefix, extend) for i in range(e)]
        out["extend"] = check(probe.calls[-1], eq, rows_req, visible)
    return out


with setup.scope:
    print("RESULT " + json.dumps({kind: run(kind) for kind in ("aiter-ext", "upstream")}))
"""


@pytest.fixture(scope="module")
def runs() -> Any:
    """Both backends in one interpreter (``TRITON_INTERPRET`` must be set before Triton loads)."""
    result = run_python(SCRIPT, env={"TRITON_INTERPRET": "1"})
    assert result.returncode == 0, result.stderr[-4000:]
    return result.data


def _data(runs: Any, kind: str) -> Any:
    if not runs[kind]["unified"]:
        pytest.skip("this sglang release has no unified-attention path in its aiter backend")
    return runs[kind]


@pytest.fixture(scope="module")
def aiter_ext(runs: Any) -> Any:
    return _data(runs, "aiter-ext")


@pytest.fixture(scope="module")
def upstream(runs: Any) -> Any:
    return _data(runs, "upstream")


@pytest.mark.slow
def test_aiter_ext_unified_decode_at_the_padded_batch_is_right(aiter_ext: Any) -> None:
    decode = aiter_ext["decode"]
    assert decode["seqs"] == aiter_ext["max_bs"]
    assert decode["handed"] == decode["seqs"] + 1  # the pool grew with the graphs
    assert not decode["read_past_end"]  # the sentinels after the end made no difference
    assert decode["unwritten_rows"] == []
    assert decode["rows_right"] == 33, decode  # every real request against torch


@pytest.mark.slow
def test_upstream_unified_decode_at_the_padded_batch(upstream: Any) -> None:
    decode = upstream["decode"]
    assert decode["seqs"] == upstream["max_bs"]
    if upstream["decode_buffer"] == "qo_indptr_unified_decode":
        # 0.5.12+: the buffer stays at P + 1 entries, one short of the padded batch, and
        # amd-aiter 0.1.7 reads cu_seqlens_q[seqs] as the last sequence's query end: the output
        # depends on the entry after the handed ones.
        assert decode["handed"] == decode["seqs"]
        assert decode["read_past_end"], decode
    else:  # 0.5.11 slices qo_indptr, which upstream regrows for the graphs
        assert decode["handed"] == decode["seqs"] + 1
        assert not decode["read_past_end"], decode
    assert decode["rows_right"] == 33, decode  # the real requests are right either way


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["aiter-ext", "upstream"])
def test_unified_extend_after_graph_set_up_reads_its_own_entries(
    kind: str, request: pytest.FixtureRequest
) -> None:
    data = request.getfixturevalue(kind.replace("-", "_"))
    if not data["unified_extend"]:
        pytest.skip("this sglang release sends no extend batch through unified_attention")
    extend = data["extend"]
    assert extend["seqs"] == 3
    assert extend["handed"] == 4
    assert extend["cu_seqlens_q_tail"] == [7, 10, 19]
    assert not extend["read_past_end"]
    assert extend["unwritten_rows"] == []
    assert extend["rows_right"] == 19, extend
