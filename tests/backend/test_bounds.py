"""A batch above the captured maximum at a metadata call, with ``SGLANG_AITER_EXT_BOUNDS_CHECK``.

The guard's mechanics on a plain holder, then sglang's real metadata code (its Triton kernels
interpreted on CPU) on a frozen ``aiter-ext`` pool: with the check a too-large batch is refused
before anything is written, a batch that fits writes exactly what it writes without the check,
and without the check the instance keeps upstream's methods.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from sglang_aiter_plugin._patch import patched
from sglang_aiter_plugin._switches import SwitchValueError
from sglang_aiter_plugin.backend.bounds_check import PATCH, BatchTooLargeError, install_bounds_check
from sglang_aiter_plugin.backend.graph_metadata import METADATA_METHODS
from testkit.plugin_state import hooked_methods, pool_frozen
from testkit.subproc import run_python


class Holder:
    """Each metadata entry point shape sglang has used, recording what reached it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def init_forward_metadata_capture_cuda_graph(
        self, bs: int, num_tokens: int, req_pool_indices: Any = None, seq_lens: Any = None
    ) -> str:
        self.calls.append(("capture", bs))
        return "captured"

    def init_forward_metadata_replay_cuda_graph(self, forward_batch: Any, bs: int) -> str:
        self.calls.append(("replay", bs))
        return "replayed"

    def init_forward_metadata_out_graph(self, forward_batch: Any, in_capture: bool = False) -> str:
        self.calls.append(("out_graph", forward_batch.batch_size))
        return "out"


def test_a_batch_that_fits_reaches_the_method_with_its_arguments() -> None:
    h = Holder()
    install_bounds_check(h, 8)
    assert hooked_methods(h, PATCH) == list(METADATA_METHODS)
    assert h.init_forward_metadata_capture_cuda_graph(8, 8) == "captured"
    assert h.init_forward_metadata_capture_cuda_graph(bs=3, num_tokens=3) == "captured"
    big, small = SimpleNamespace(batch_size=99), SimpleNamespace(batch_size=1)
    assert h.init_forward_metadata_replay_cuda_graph(big, 8) == "replayed"  # bs wins
    assert h.init_forward_metadata_out_graph(small, in_capture=True) == "out"
    assert h.calls == [("capture", 8), ("capture", 3), ("replay", 8), ("out_graph", 1)]


@pytest.mark.parametrize(
    ("name", "args", "kwargs"),
    [
        ("init_forward_metadata_capture_cuda_graph", (9, 9), {}),
        ("init_forward_metadata_capture_cuda_graph", (), {"bs": 9, "num_tokens": 9}),
        ("init_forward_metadata_replay_cuda_graph", (SimpleNamespace(batch_size=1), 9), {}),
        ("init_forward_metadata_out_graph", (SimpleNamespace(batch_size=9),), {}),
        ("init_forward_metadata_out_graph", (), {"forward_batch": SimpleNamespace(batch_size=9)}),
    ],
)
def test_a_batch_above_capacity_is_refused_before_the_method_runs(
    name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    h = Holder()
    install_bounds_check(h, 8)
    with pytest.raises(BatchTooLargeError) as info:
        getattr(h, name)(*args, **kwargs)
    assert h.calls == []
    text = str(info.value)
    assert f"Holder.{name}" in text
    assert "batch of 9 rows" in text
    assert "at most 8" in text
    assert "nothing was written" in text
    assert "--cuda-graph-max-bs" in text


def test_a_batch_longer_than_the_indices_buffer_is_refused_before_the_method_runs() -> None:
    h = Holder()
    h.cuda_graph_kv_indices, h.topk = torch.zeros(100, dtype=torch.int32), 2  # type: ignore[attr-defined]
    install_bounds_check(h, 8, extra_per_row=4)
    lens = torch.full((8,), 4)
    fits = SimpleNamespace(batch_size=8, seq_lens=lens, seq_lens_sum=34)  # 34 x 2 + 8 x 4 = 100
    assert h.init_forward_metadata_out_graph(fits) == "out"
    longer = SimpleNamespace(batch_size=8, seq_lens=lens, seq_lens_sum=35)  # 102
    with pytest.raises(BatchTooLargeError) as info:
        h.init_forward_metadata_out_graph(longer)
    assert h.calls == [("out_graph", 8)]
    text = str(info.value)
    assert "Holder.init_forward_metadata_out_graph" in text
    assert "seq_lens_sum is 35 (x topk 2, + 4 per row)" in text
    assert "needs 102 entries of cuda_graph_kv_indices, which holds 100; " in text  # in all
    assert "nothing was written" in text
    draft = Holder()  # the draft wrapper's buffer: one row per draft step, each checked alone
    draft.cuda_graph_kv_indices, draft.topk = torch.zeros((3, 100), dtype=torch.int32), 2  # type: ignore[attr-defined]
    install_bounds_check(draft, 8, extra_per_row=4)
    assert draft.init_forward_metadata_out_graph(fits) == "out"
    with pytest.raises(BatchTooLargeError, match="which holds 100 per draft step; "):
        draft.init_forward_metadata_out_graph(longer)
    # a call without seq_lens_sum (capture, 0.5.11-0.5.17) is summed from its seq_lens
    with pytest.raises(BatchTooLargeError, match="seq_lens_sum is 104"):
        h.init_forward_metadata_capture_cuda_graph(8, 8, seq_lens=torch.full((8,), 13))


def test_installing_twice_wraps_once() -> None:
    h = Holder()
    install_bounds_check(h, 8)
    first = h.init_forward_metadata_out_graph
    install_bounds_check(h, 8)
    assert h.init_forward_metadata_out_graph is first
    assert patched(first, PATCH)
    assert not patched(Holder.init_forward_metadata_out_graph, PATCH)


def test_a_method_without_a_batch_size_is_named() -> None:
    class Changed:
        def init_forward_metadata_out_graph(self, batch: Any) -> None: ...

    with pytest.raises(RuntimeError, match=r"takes neither 'bs' nor 'forward_batch'.*Unset"):
        install_bounds_check(Changed(), 8)


# sglang's own metadata code on a frozen pool (P = 33, two-batch overlap: max_bs = 34), one
# interpreter for every case (TRITON_INTERPRET must be set before Triton is imported): each decode
# path with and without the switch (read per instance, at graph set-up), then the draft wrapper.
SCRIPT = """
import os, hashlib, pathlib, tempfile, torch
from testkit.sglang_setup import SCENARIOS, POOL, configure, write_model_dir
from sglang_aiter_plugin.selftest.decode_batch import DecodeBatch, draft_metadata
from testkit.batches import draft_batch
from testkit.doubles import aiter_backend_imports
from sglang.srt.layers.attention import aiter_backend
from sglang_aiter_plugin.backend.graph_metadata import METADATA_METHODS
aiter_backend_imports.install(aiter_backend)
model_dir = write_model_dir(pathlib.Path(tempfile.mkdtemp()) / "m")

def decode(unified, check):
    os.environ["SGLANG_USE_AITER_UNIFIED_ATTN"] = unified
    os.environ.pop("SGLANG_AITER_EXT_BOUNDS_CHECK", None)
    if check:
        os.environ["SGLANG_AITER_EXT_BOUNDS_CHECK"] = "1"
    setup = configure(model_dir, SCENARIOS["two-batch-overlap"], ("--page-size", "16"))
    with setup.scope:
        from sglang_aiter_plugin.backend.classes import AiterExtAttnBackend
        b = AiterExtAttnBackend(setup.runner)
        table = setup.runner.req_to_token_pool.req_to_token
        table.copy_(torch.arange(table.numel(), dtype=table.dtype).view_as(table) % 997)
        b.init_cuda_graph_state(setup.max_bs, setup.max_bs)
        names = b.buffer_pool.names() + [
            n for n in ("cuda_graph_kv_indices", "cuda_graph_page_table")
            if isinstance(getattr(b, n, None), torch.Tensor)
        ]
        def digest():
            return {n: hashlib.sha1(getattr(b, n).contiguous().view(torch.uint8).numpy())
                    .hexdigest() for n in names}
        def call(bs, in_capture):
            batch = DecodeBatch(b, bs, "cpu")
            n = min(bs, POOL)
            batch.set(list(range(n)), [17 + 3 * i for i in range(n)],
                      torch.zeros(n, b.num_head * b.head_dim))
            before = digest()
            try:
                batch.metadata(in_capture=in_capture)
                error = None
            except Exception as exc:
                error = [type(exc).__name__, str(exc)]
            after = digest()
            return dict(error=error, changed=sorted(n for n in names if before[n] != after[n]),
                        state=after)
        return dict(
            max_bs=setup.max_bs,
            shadowed=sorted(m for m in METADATA_METHODS if m in vars(b)),
            fits=call(setup.max_bs, False),
            above_replay=call(setup.max_bs + 2, False),
            above_capture=call(setup.max_bs + 2, True),
        )

def draft():
    os.environ["SGLANG_AITER_EXT_BOUNDS_CHECK"] = "1"
    setup = configure(model_dir, SCENARIOS["two-batch-overlap"])
    with setup.scope:
        from sglang_aiter_plugin.backend.classes import AiterExtMultiStepDraftBackend
        d = AiterExtMultiStepDraftBackend(setup.runner, 1, 3)
        d.init_cuda_graph_state(setup.max_bs, setup.max_bs)
        def replay(bs):  # the draft graph runner's metadata call for one replay
            fb = draft_batch(setup.runner, bs, "cpu")
            before = d.kv_indptr.clone()
            try:
                draft_metadata(d, fb)
                error = None
            except Exception as exc:
                error = [type(exc).__name__, str(exc)]
            return dict(error=error, unchanged=bool(torch.equal(before, d.kv_indptr)),
                        row0=d.kv_indptr[0, : bs + 1].tolist())
        return dict(
            max_bs=setup.max_bs, fits=replay(setup.max_bs), above=replay(setup.max_bs + 2),
            shadowed=sorted(m for m in METADATA_METHODS if m in vars(d)),
            children=[sorted(m for m in METADATA_METHODS if m in vars(c))
                      for c in d.attn_backends],
        )

out = {f"{path}-{check}": decode("1" if path == "unified" else "0", check == "checked")
       for path in ("ragged", "unified") for check in ("checked", "plain")}
out["draft"] = draft()
print("RESULT " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def metadata_runs() -> Any:
    result = run_python(SCRIPT, env={"TRITON_INTERPRET": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    return result.data


@pytest.mark.slow
@pytest.mark.parametrize("path", ["ragged", "unified"])
def test_sglangs_metadata_code_behind_the_check(path: str, metadata_runs: Any) -> None:
    checked, plain = metadata_runs[f"{path}-checked"], metadata_runs[f"{path}-plain"]

    # Without the switch the instance keeps upstream's methods (nothing on the per-step path).
    assert plain["shadowed"] == []
    assert checked["shadowed"], checked["shadowed"]

    # A batch that fits: the metadata call writes the same buffers, the same bytes.
    assert checked["fits"]["error"] is None, checked["fits"]
    assert checked["fits"]["changed"], "the metadata call wrote nothing to compare"
    scratch = {"workspace_buffer"}  # allocated uninitialised: differs between instances
    assert {k: v for k, v in checked["fits"]["state"].items() if k not in scratch} == {
        k: v for k, v in plain["fits"]["state"].items() if k not in scratch
    }

    # Above the captured maximum: refused by name before upstream runs; not one byte changed.
    for key in ("above_replay", "above_capture"):
        got = checked[key]
        assert got["error"] is not None, got
        assert got["error"][0] == "BatchTooLargeError", got
        assert f"a batch of {checked['max_bs'] + 2} rows" in got["error"][1]
        assert f"at most {checked['max_bs']}" in got["error"][1]
        assert got["changed"] == [], got["changed"]


@pytest.mark.slow
def test_draft_wrapper_and_children_are_checked(metadata_runs: Any) -> None:
    data = metadata_runs["draft"]
    assert data["shadowed"], data
    assert all(data["children"]), data
    # A batch that fits reaches sglang's draft kernel: step 0 holds each sequence's 9 + 1 entries.
    assert data["fits"]["error"] is None, data["fits"]
    assert data["fits"]["row0"] == list(range(0, 10 * (data["max_bs"] + 1), 10))
    # Above the maximum (upstream's kernel would write each row's tail over the next row's start
    # and past the buffer's end): refused by name, nothing written.
    assert data["above"]["error"][0] == "BatchTooLargeError", data["above"]
    assert data["above"]["unchanged"]


@pytest.mark.parametrize("sglang_setup", ["two-batch-overlap"], indirect=True)
def test_a_bad_switch_value_fails_before_the_pool_grows(
    sglang_setup: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sglang_aiter_plugin.backend.classes import AiterExtAttnBackend

    backend = AiterExtAttnBackend(sglang_setup.runner)
    capacity = backend.buffer_pool.capacity
    monkeypatch.setenv("SGLANG_AITER_EXT_BOUNDS_CHECK", "sometimes")
    with pytest.raises(SwitchValueError, match="SGLANG_AITER_EXT_BOUNDS_CHECK='sometimes'"):
        backend.init_cuda_graph_state(sglang_setup.max_bs, 1)
    assert backend.buffer_pool.capacity == capacity
    assert not pool_frozen(backend.buffer_pool)
