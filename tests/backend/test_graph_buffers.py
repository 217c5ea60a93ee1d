"""CUDA-graph buffers as wide as what sglang writes into them, holding what the kernel reads.

Every case runs sglang's own ``init_cuda_graph_state`` and graph metadata code (its Triton kernels
interpreted on the CPU) through ``tests/compat/buffer_widths.py``'s :func:`measure`, on the
installed release, for upstream ``aiter`` and ``aiter-ext``:

* **width** (0.5.11-0.5.12.post1): ``cuda_graph_kv_indices`` is allocated one entry per page
  while decode replay (ragged and MLA), target-verify and draft-extend write one per token; at
  page size 16 a full-context replay writes past it;
* **draft slack** (0.5.11-0.5.12.post1): MLA target-verify writes ``seq_len + num_draft_tokens``
  per row;
* **content** (every release): with ``SGLANG_USE_AITER_UNIFIED_ATTN=1``, page size 1 and no
  sliding window, replay leaves the page table the captured kernel reads as allocated (zeros);
* **warm-up ceiling** (sglang#40668): attention-TP 8 and a pool of 100 make an eager batch of 104
  while graphs stop at 100;
* ``SGLANG_AITER_EXT_BOUNDS_CHECK=1`` refuses a replay whose ``seq_lens_sum`` exceeds the indices
  buffer before anything is written.

Upstream is a strict expected failure on each release that has the defect, so the gap stays
visible and a release that fixes it is noticed.
"""

from __future__ import annotations

from typing import Any

import pytest
from packaging.version import Version

from testkit.subproc import run_python

MEASURE = """
from pathlib import Path
import tempfile
from testkit.sglang_setup import write_model_dir
from tests.compat.buffer_widths import measure
root = Path(tempfile.mkdtemp())
rows = measure(write_model_dir(root / 'model'), write_model_dir(root / 'mla', mla=True))
print('RESULT ' + json.dumps(rows))
"""


def _release() -> Version:
    from sglang_aiter_plugin._sglang import installed_sglang_version

    release = installed_sglang_version()
    assert release is not None
    return Version(str(release))


def _per_page_kv_indices() -> bool:
    """0.5.11, 0.5.12 and 0.5.12.post1 size ``cuda_graph_kv_indices`` per page, without the
    draft slack (sglang#24587, in 0.5.13)."""
    return _release() < Version("0.5.13")


@pytest.fixture(scope="module")
def rows() -> dict[tuple[str, str, int, str], dict[str, Any]]:
    """Every measured row, keyed by (backend, path, page size, buffer)."""
    result = run_python(MEASURE, env={"TRITON_INTERPRET": "1"}, timeout=1200)
    assert result.returncode == 0, result.stderr[-3000:]
    out = {}
    for r in result.data:
        assert not r.get("error"), r  # every path builds on every supported release
        out[(r["kind"], r["path"], r["page"], r["buffer"])] = r
    return out


def _upstream_xfail(defect: bool, reason: str) -> list[Any]:
    return [pytest.mark.xfail(strict=True, reason=reason)] if defect else []


def _cases(rows_: list[tuple[str, int, str, bool, str]]) -> list[Any]:
    params = []
    for path, page, buffer, upstream_defect, reason in rows_:
        for kind in ("upstream", "aiter-ext"):
            marks = _upstream_xfail(kind == "upstream" and upstream_defect, reason)
            params.append(pytest.param(kind, path, page, buffer, marks=marks,
                                       id=f"{kind}-{path}-page{page}-{buffer}".replace(" ", "_")))
    return params


PER_PAGE = _per_page_kv_indices()
WIDTH = "cuda_graph_kv_indices sized per page (0.5.11-0.5.12.post1)"
WIDTH_ROWS = [
    ("decode (ragged)", 16, "cuda_graph_kv_indices", PER_PAGE, WIDTH),
    ("decode (ragged)", 1, "cuda_graph_kv_indices", False, ""),
    ("MLA decode", 16, "cuda_graph_kv_indices", PER_PAGE, WIDTH),
    ("MLA decode", 1, "cuda_graph_kv_indices", False, ""),
    ("target-verify", 16, "cuda_graph_kv_indices", PER_PAGE, WIDTH),
    ("draft-extend", 16, "cuda_graph_kv_indices", PER_PAGE, WIDTH),
    ("MLA draft-extend", 16, "cuda_graph_kv_indices", PER_PAGE, WIDTH),
    ("MLA target-verify", 16, "cuda_graph_kv_indices", PER_PAGE, WIDTH),
    ("MLA target-verify", 1, "cuda_graph_kv_indices", PER_PAGE,
     "no draft slack for MLA target-verify (0.5.11-0.5.12.post1)"),
    ("decode (unified)", 16, "cuda_graph_page_table", False, ""),
]


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "path", "page", "buffer"), _cases(WIDTH_ROWS))
def test_graph_buffer_holds_a_full_context_batch(
    kind: str, path: str, page: int, buffer: str,
    rows: dict[tuple[str, str, int, str], dict[str, Any]],
) -> None:
    r = _row(rows, kind, path, page, buffer)
    assert r["needed"] > 0
    assert r["allocated"] >= r["needed"], r
    assert not r.get("written_past"), r
    assert r.get("content", "right") == "right", r


def _row(rows: dict[tuple[str, str, int, str], dict[str, Any]], kind: str, path: str,
         page: int, buffer: str) -> dict[str, Any]:
    if buffer == "cuda_graph_page_table" and _release() < Version("0.5.13"):
        buffer = "cuda_graph_kv_indices"  # 0.5.11-0.5.12: the unified page table is a view of it
    return rows[(kind, path, page, buffer)]


@pytest.mark.slow
def test_a_per_page_buffer_is_written_past_by_upstream_replay(
    rows: dict[tuple[str, str, int, str], dict[str, Any]],
) -> None:
    """The measurement is not vacuous: where upstream sizes per page, its replay really writes
    past the buffer (into the guard), exactly the per-token excess."""
    r = rows[("upstream", "decode (ragged)", 16, "cuda_graph_kv_indices")]
    if PER_PAGE:
        assert r["written_past"] == r["needed"] - r["allocated"] > 0, r
    else:
        assert r["written_past"] == 0, r


@pytest.mark.slow
@pytest.mark.parametrize("kind", [
    pytest.param("upstream", marks=pytest.mark.xfail(
        strict=True, reason="page 1 without a sliding window: replay never fills the table")),
    "aiter-ext",
])
def test_unified_page_table_equals_req_to_token_after_replay(
    kind: str, rows: dict[tuple[str, str, int, str], dict[str, Any]],
) -> None:
    r = _row(rows, kind, "decode (unified)", 1, "cuda_graph_page_table")
    assert r["ran"], r
    assert r["content"] == "right", r["content"]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["upstream", "aiter-ext"])
def test_unified_page16_table_is_right_on_both(
    kind: str, rows: dict[tuple[str, str, int, str], dict[str, Any]],
) -> None:
    """Control: the paged branch of the same code fills the table (content check not vacuous)."""
    r = _row(rows, kind, "decode (unified)", 16, "cuda_graph_page_table")
    assert r["content"] == "right", r["content"]


WARMUP = "eager warm-up ceiling (attention-TP 8, P=100)"


@pytest.mark.slow
@pytest.mark.parametrize("kind", [
    pytest.param("upstream", marks=pytest.mark.xfail(
        strict=True, reason="upstream sizes batch rows by P = 100; MLP sync pads to 104")),
    "aiter-ext",
])
def test_eager_warm_up_ceiling_is_held(
    kind: str, rows: dict[tuple[str, str, int, str], dict[str, Any]],
) -> None:
    r = rows[(kind, WARMUP, 1, "kv_indptr / kv_last_page_len rows")]
    assert r["needed"] == 104, r  # sglang pads 100 to the attention-TP size 8
    assert r["allocated"] >= r["needed"], r


# Rows the measurement found beyond the ones above, wrong upstream on every release: a strict
# expected failure there (so the day upstream is fixed the test says so), right for aiter-ext.
DRAFT_ROW = ("row width max_bs*topk*max_context_len; the last step writes "
             "seq_lens_sum*topk + bs*steps")
MASK = "max_num_tokens*max_context_len; replay copies d*(seq_len+d) per request"
OPEN_ROWS = [
    (path, page, buffer, reason)
    for page in (1, 16)
    for path, buffer, reason in (
        ("EAGLE draft decode", "draft cuda_graph_kv_indices (per step)", DRAFT_ROW),
        ("target-verify", "cuda_graph_custom_mask", MASK),
    )
]


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "path", "page", "buffer", "reason"), [
    pytest.param(kind, path, page, buffer, reason,
                 marks=_upstream_xfail(kind == "upstream", reason),
                 id=f"{kind}-{path}-page{page}-{buffer}".replace(" ", "_"))
    for path, page, buffer, reason in OPEN_ROWS for kind in ("upstream", "aiter-ext")
])
def test_open_rows_at_the_longest_request(
    kind: str, path: str, page: int, buffer: str, reason: str,
    rows: dict[tuple[str, str, int, str], dict[str, Any]],
) -> None:
    r = rows[(kind, path, page, buffer)]
    assert r["allocated"] >= r["needed"], r


BOUNDS = """
import torch
from sglang.srt.layers.attention import aiter_backend
from testkit.doubles import aiter_backend_imports
from testkit.batch_paths import SCENARIOS, build_backend, graph_max
from sglang_aiter_plugin.selftest.decode_batch import DecodeBatch
from testkit.sglang_setup import configure, write_model_dir
from tests.compat.buffer_widths import _fill_table, _guard
from pathlib import Path
import tempfile

aiter_backend_imports.install(aiter_backend)
setup = configure(write_model_dir(Path(tempfile.mkdtemp()) / 'm'), SCENARIOS['plain'],
                  ('--page-size', '{page}'), pool=8)
with setup.scope:
    bs = graph_max(setup)
    _fill_table(setup.runner)  # no entry 0: every index written changes the buffer
    backend = build_backend('aiter-ext', setup, 'ragged', graphs=True)
    batch = DecodeBatch(backend, bs, 'cpu')
    heads = backend.num_head * backend.head_dim
    batch.set([0] * bs, [1] * bs, torch.zeros(bs, heads))
    batch.metadata(in_capture=True)
    backing, n = _guard(backend, 'cuda_graph_kv_indices')
    before, indptr = backing.clone(), backend.kv_indptr.clone()
    # every row from request 0, one token more per row than the buffer holds in total: the
    # kernel would read request 0's row and the rows after it (inside the table) and write
    # past the buffer (into the guard)
    per_row = n // bs + 1
    batch.set([0] * bs, [per_row] * bs, torch.zeros(bs, heads))
    error = None
    try:
        batch.metadata(in_capture=False)
    except Exception as exc:
        from sglang_aiter_plugin._errors import AiterExtError
        error = dict(type=type(exc).__name__, plugin=isinstance(exc, AiterExtError),
                     message=str(exc))
    print('RESULT ' + json.dumps(dict(
        error=error, buffer=n, seq_lens_sum=per_row * bs,
        indices_written=int((backing != before).sum()),
        indptr_changed=not torch.equal(indptr, backend.kv_indptr))))
"""


@pytest.mark.slow
@pytest.mark.parametrize("page", [1, 16])
def test_bounds_check_refuses_a_replay_past_the_indices_buffer(page: int) -> None:
    result = run_python(BOUNDS.format(page=page),
                        env={"TRITON_INTERPRET": "1", "SGLANG_AITER_EXT_BOUNDS_CHECK": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    got = result.data
    assert got["seq_lens_sum"] > got["buffer"]
    assert got["error"] is not None, got
    assert got["error"]["plugin"], got["error"]
    assert "seq_lens_sum" in got["error"]["message"], got["error"]
    assert "cuda_graph_kv_indices" in got["error"]["message"], got["error"]
    assert got["indices_written"] == 0, got  # refused before anything was written
    assert not got["indptr_changed"], got


@pytest.mark.slow
def test_every_measured_row_has_a_case(
    rows: dict[tuple[str, str, int, str], dict[str, Any]],
) -> None:
    """A row the measurement adds without a case here (or a case whose row is gone) is noticed."""
    cased = {(p, pg, b) for p, pg, b, _, _ in WIDTH_ROWS} | {
        (p, pg, b) for p, pg, b, _ in OPEN_ROWS} | {
        ("decode (unified)", 1, "cuda_graph_page_table"),
        (WARMUP, 1, "kv_indptr / kv_last_page_len rows")}
    if _release() < Version("0.5.13"):
        cased = {(p, pg, "cuda_graph_kv_indices" if b == "cuda_graph_page_table" else b)
                 for p, pg, b in cased}
    measured = {(p, pg, b) for k, p, pg, b in rows if k == "aiter-ext"}
    wrong_upstream = {(p, pg, b) for (k, p, pg, b), r in rows.items()
                      if k == "upstream" and r["verdict"] != "right"}
    assert wrong_upstream <= cased, wrong_upstream - cased
    assert cased <= measured, cased - measured


DRAFT_BOUNDS = """
import torch
from sglang.srt.layers.attention import aiter_backend
from testkit.doubles import aiter_backend_imports
from testkit.batch_paths import SCENARIOS, graph_max
from sglang_aiter_plugin.selftest.decode_batch import draft_metadata
from testkit.batches import draft_batch
from testkit.sglang_setup import configure, write_model_dir
from tests.compat.buffer_widths import _fill_table, _guard
from sglang_aiter_plugin.backend.classes import AiterExtMultiStepDraftBackend
from pathlib import Path
import tempfile

aiter_backend_imports.install(aiter_backend)
setup = configure(write_model_dir(Path(tempfile.mkdtemp()) / 'm'), SCENARIOS['plain'], (), pool=8)
with setup.scope:
    bs, steps = graph_max(setup), 3
    _fill_table(setup.runner)
    draft = AiterExtMultiStepDraftBackend(setup.runner, 1, steps)
    draft.init_cuda_graph_state(bs, bs)
    width = int(draft.cuda_graph_kv_indices.shape[-1])
    backing, n = _guard(draft, 'cuda_graph_kv_indices')
    before, indptr = backing.clone(), draft.kv_indptr.clone()
    # sequences as long as the row holds: the steps' appended tokens go past it
    seq_len = width // bs
    error = None
    try:
        draft_metadata(draft, draft_batch(setup.runner, bs, 'cpu', seq_len=seq_len))
    except Exception as exc:
        from sglang_aiter_plugin._errors import AiterExtError
        error = dict(type=type(exc).__name__, plugin=isinstance(exc, AiterExtError),
                     message=str(exc))
    print('RESULT ' + json.dumps(dict(
        error=error, width=width, needed=bs * seq_len + bs * steps,
        indices_written=int((backing != before).sum()),
        indptr_changed=not torch.equal(indptr, draft.kv_indptr))))
"""


@pytest.mark.slow
def test_bounds_check_refuses_a_draft_replay_past_its_row() -> None:
    """The draft wrapper: ``seq_lens_sum * topk + bs * steps`` against the per-step row."""
    result = run_python(DRAFT_BOUNDS,
                        env={"TRITON_INTERPRET": "1", "SGLANG_AITER_EXT_BOUNDS_CHECK": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    got = result.data
    assert got["needed"] > got["width"]
    assert got["error"] is not None, got
    assert got["error"]["plugin"], got["error"]
    assert "seq_lens_sum" in got["error"]["message"], got["error"]
    assert got["indices_written"] == 0, got
    assert not got["indptr_changed"], got
