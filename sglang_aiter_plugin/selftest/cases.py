"""The self-test's cases: one decode path, page size and form each, run for upstream ``aiter`` and
for ``aiter-ext`` alike. Data only; :mod:`.checks` runs a case in a child process.

:data:`CASES` are the cases of the self-test's own configurations (a tiny config-only model);
:mod:`.deployment` builds the cases of an operator's own sglang arguments instead."""

from __future__ import annotations

from dataclasses import dataclass

from sglang_aiter_plugin._errors import AiterExtError

__all__ = ["CASES", "FORMS", "KINDS", "Case", "Deployment", "UnknownCaseError", "by_name"]

KINDS = ("upstream", "aiter-ext")
"""The two backends each case builds: sglang's ``AiterAttnBackend`` and the plugin's."""

FORMS = {
    "graphs": "decode CUDA/HIP graphs captured at every size sglang captures (below and above the "
              "request pool P), replayed with real requests",
    "eager": "one eager decode batch as DP attention's MLP sync pads it above P (graphs off)",
    "metadata": "the CUDA-graph metadata of every captured size, written by sglang's own kernels "
                "(no attention kernel runs)",
}


@dataclass(frozen=True)
class Case:
    name: str
    path: str
    """``ragged`` (aiter's paged decode), ``unified`` (``SGLANG_USE_AITER_UNIFIED_ATTN=1``),
    ``mla`` (multi-head latent attention) or ``draft`` (the EAGLE multi-step draft wrapper)."""
    page: int
    form: str
    """A key of :data:`FORMS`."""
    deployment: Deployment | None = None
    """The operator's configuration this case is built from; ``None``: the self-test's own."""
    skip: str = ""
    """Why the self-test cannot run this case yet ("": it runs)."""
    why: str = ""
    """Why the configuration takes this case (the deployment's cases)."""
    mode: str = "decode"
    """The batches' forward mode: ``decode``, ``verify`` (EAGLE's target verify: each request's
    draft tokens against its KV) or ``draft-extend`` (EAGLE's draft extend)."""
    gpu_only: str = ""
    """Why this case runs on a GPU only, beyond graph capture ("": it does not)."""

    @property
    def needs_gpu(self) -> bool:
        """Graph capture, and a case with :attr:`gpu_only`, need a GPU; the other forms also run
        on ``--device cpu``."""
        return self.form == "graphs" or bool(self.gpu_only)

    @property
    def why_gpu(self) -> str:
        return self.gpu_only or "graph capture needs a GPU"

    def describe(self) -> str:
        if self.deployment is not None:
            return self.why + (f" -- skipped: {self.skip}" if self.skip else "")
        what = {"ragged": "ragged paged decode", "unified": "unified page-table decode",
                "mla": "MLA decode", "draft": "EAGLE draft wrapper, per-step kv_indptr"}[self.path]
        return f"{what}, page size {self.page}: {FORMS[self.form]}"


@dataclass(frozen=True)
class Deployment:
    """An operator's sglang configuration as one rank of it sees it (:mod:`.deployment`)."""

    args: tuple[str, ...]
    """The sglang server arguments as given (the worker parses them again)."""
    model: str
    """The local folder holding the model's config.json."""
    pool: int
    """Requests in this rank's request pool."""
    attn_tp: int
    """Attention-TP size: the ranks one attention group's heads are split over."""
    attn_dp: int
    """Attention-DP size: the ranks whose batches MLP sync pads together."""
    draft: tuple[int, int] | None = None
    """The EAGLE draft wrapper's (top-k, steps), where speculative decoding is on."""


CASES: tuple[Case, ...] = (
    Case("ragged-page1-graphs", "ragged", 1, "graphs"),
    Case("ragged-page16-graphs", "ragged", 16, "graphs"),
    Case("unified-page1-graphs", "unified", 1, "graphs"),
    Case("mla-graphs", "mla", 1, "graphs"),
    Case("draft-metadata", "draft", 1, "metadata"),
    Case("ragged-page1-eager", "ragged", 1, "eager"),
    Case("ragged-page16-eager", "ragged", 16, "eager"),
    Case("unified-page1-eager", "unified", 1, "eager"),
    Case("mla-eager", "mla", 1, "eager"),
)


class UnknownCaseError(AiterExtError, ValueError):
    """``--only`` named a case the self-test does not have."""


def by_name(names: list[str], cases: tuple[Case, ...] = CASES) -> list[Case]:
    """The cases of ``cases`` named (in its order); an unknown name raises
    :class:`UnknownCaseError` naming the known ones."""
    known = {c.name: c for c in cases}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UnknownCaseError(
            f"unknown case {', '.join(unknown)}; the cases are {', '.join(known)}")
    return [c for c in cases if c.name in names]
