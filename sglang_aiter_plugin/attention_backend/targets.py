"""Every sglang symbol the ``attention-backend`` fix touches, in one table.

``module:qualname`` as in sglang 0.5.11-0.5.23. :data:`TARGETS` is what the fix's ledger, the
README and the canary tests read; :data:`CONSTRUCTION_SITES` is the subset that builds an aiter
backend class (pinned per release by ``tests/attention_backend/audit``).
"""

from __future__ import annotations

__all__ = [
    "AITER_MODULE",
    "CONSTRUCTION_SITES",
    "DRAFT_UTILS_MODULE",
    "REGISTRY_MODULE",
    "SERVER_ARGS_MODULE",
    "TARGETS",
    "Target",
]

SERVER_ARGS_MODULE = "sglang.srt.server_args"
REGISTRY_MODULE = "sglang.srt.layers.attention.attention_registry"
DRAFT_UTILS_MODULE = "sglang.srt.speculative.draft_utils"
AITER_MODULE = "sglang.srt.layers.attention.aiter_backend"


class Target:
    """One sglang symbol and what the fix does to it; ``builds``: the aiter class this function
    constructs (construction sites only). A plain class: this module loads at every start-up."""

    __slots__ = ("builds", "change", "module", "qualname")

    def __init__(self, module: str, qualname: str, change: str,
                 builds: str | None = None) -> None:
        self.module = module
        self.qualname = qualname
        self.change = change
        self.builds = builds

    def __repr__(self) -> str:
        return f"Target({str(self)!r})"

    def __str__(self) -> str:
        return f"{self.module}:{self.qualname}"


TARGETS: tuple[Target, ...] = (
    Target(SERVER_ARGS_MODULE, "ATTENTION_BACKEND_CHOICES",
           "'aiter-ext' appended to the shared list, in place"),
    Target(SERVER_ARGS_MODULE, "ServerArgs.resolve_once",
           "wrapped (0.5.19+): fold 'aiter-ext' to 'aiter' before resolution"),
    Target(SERVER_ARGS_MODULE, "ServerArgs.__post_init__",
           "wrapped (0.5.11-0.5.18): fold 'aiter-ext' to 'aiter' before resolution"),
    Target(REGISTRY_MODULE, "ATTENTION_BACKENDS['aiter']",
           "wrapped: runs sglang's create_aiter_backend building the plugin's class when chosen",
           builds="AiterAttnBackend"),
    Target(REGISTRY_MODULE, "ATTENTION_BACKENDS['aiter-ext']",
           "added: fails fast when a launch path skipped the fold"),
    Target(DRAFT_UTILS_MODULE, "DraftBackendFactory._create_aiter_prefill_backend",
           "wrapped: builds the plugin's class when chosen", builds="AiterAttnBackend"),
    Target(DRAFT_UTILS_MODULE, "DraftBackendFactory._create_aiter_decode_backend",
           "wrapped: builds the plugin's class when chosen",
           builds="AiterMultiStepDraftBackend"),
    Target(AITER_MODULE, "AiterMultiStepDraftBackend.__init__",
           "not modified: the plugin's draft class runs a copy building its own children",
           builds="AiterAttnBackend"),
)

#: (module, qualified name) of every function that constructs an aiter backend class.
CONSTRUCTION_SITES: frozenset[tuple[str, str]] = frozenset(
    {
        (t.module, "create_aiter_backend" if t.module == REGISTRY_MODULE else t.qualname)
        for t in TARGETS
        if t.builds is not None
    }
)
