"""A test-only sglang plugin that installs the server doubles in every process sglang starts.

:func:`site_dir` writes a directory holding a tiny ``sglang-e2e-doubles`` distribution (a
``dist-info`` with one ``sglang.srt.plugins`` entry point, ``e2e_doubles`` ->
:func:`install`). The tests put that directory first on the server's ``PYTHONPATH`` (and only
the server's), so sglang's own plugin loader runs :func:`install` in the launcher, the DP
controller, every scheduler and the detokenizer -- before the product's plugin, which is
discovered later on the path. The product package is not touched.

What is installed is chosen by ``SGLANG_E2E_DOUBLES`` (comma-separated):

* ``aiter``: the ``aiter`` package double (:mod:`testkit.doubles.aiter_kernels`);
* ``unified``: with ``aiter``, aiter's real Triton ``unified_attention`` behind it
  (:mod:`testkit.doubles.aiter_triton`, Triton's interpreter);
* ``rocm-host``: the plugin's ROCm host check answers "a ROCm host with aiter"
  (``sglang_aiter_plugin.backend``'s two questions return no problem);
* ``fill-value``: sglang's attention backends get ``get_cpu_graph_seq_len_fill_value`` (the
  backend's CUDA-graph fill value, else 1 as sglang's AMX backend answers), which DP
  attention's padding calls on CPU (0.5.23) and only sglang's AMX backends define.

Always: a recorder of the plugin's log lines per process (``<record dir>/<pid>.log``), standing in
for the application's log handler (the lines still reach stderr).

The ``sgl_kernel`` import stub is not installed here: sglang imports it before plugins load, so
the tests put ``gpu/wheelhouse`` (which holds it) on the server's ``PYTHONPATH``.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

__all__ = ["DIST_NAME", "DOUBLES_VAR", "install", "site_dir"]

DOUBLES_VAR = "SGLANG_E2E_DOUBLES"
DIST_NAME = "sglang_e2e_doubles"
ENTRY_POINT = "e2e_doubles"


class _Recorder(logging.Handler):
    """The plugin's records, one file per process; to stderr too while nothing else shows them."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("[%(asctime)s] %(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        from testkit.doubles.aiter_kernels import record as write

        line = self.format(record)
        write(line)
        if not logging.getLogger().handlers:
            sys.stderr.write(line + "\n")


def _rocm_host() -> None:
    import sglang_aiter_plugin.backend as _availability

    # the double answers the plugin's two questions ("a ROCm torch with aiter?" and "does
    # `import aiter` work?") as an MI300 host with sglang's ROCm image would: no problem
    setattr(_availability, "host_problem", lambda: None)  # noqa: B010
    setattr(_availability, "aiter_problem", lambda: None)  # noqa: B010


def _fill_value() -> None:
    from sglang.srt.layers.attention.base_attn_backend import AttentionBackend

    if not hasattr(AttentionBackend, "get_cpu_graph_seq_len_fill_value"):
        def get_cpu_graph_seq_len_fill_value(self: AttentionBackend) -> int:
            # the backend's CUDA-graph fill value where it has one (aiter: 1); otherwise 1,
            # what sglang's own CPU backend (intel_amx) answers
            try:
                return int(self.get_cuda_graph_seq_len_fill_value())
            except NotImplementedError:
                return 1

        AttentionBackend.get_cpu_graph_seq_len_fill_value = get_cpu_graph_seq_len_fill_value


def _aiter(unified: bool) -> None:
    from testkit.doubles import aiter_kernels

    kernel = None
    if unified:
        from testkit.doubles.aiter_triton import installed_tree, loaded

        tree = installed_tree()
        if tree is None:
            raise RuntimeError("amd-aiter is not installed (bash tools/env.sh)")
        with loaded(tree) as found:
            kernel = aiter_kernels.recording_unified(
                found.unified_attention, f"{found.module.__name__} ({tree.origin})")
    aiter_kernels.install(unified=kernel)


def install() -> None:
    """The entry point: install what ``SGLANG_E2E_DOUBLES`` names in this process."""
    chosen = {x.strip() for x in os.environ.get(DOUBLES_VAR, "").split(",") if x.strip()}
    logging.getLogger("sglang_aiter_plugin").addHandler(_Recorder())
    if "aiter" in chosen:
        _aiter("unified" in chosen)
    if "rocm-host" in chosen:
        _rocm_host()
    if "fill-value" in chosen:
        _fill_value()
    from testkit.doubles.aiter_kernels import record

    record(f"e2e doubles installed: {','.join(sorted(chosen)) or 'none'}")


def site_dir(root: Path) -> Path:
    """Write the test-only distribution under ``root`` (a ``PYTHONPATH`` entry); return it."""
    info = root / f"{DIST_NAME}-0.0.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {DIST_NAME}\nVersion: 0.0.0\n")
    (info / "entry_points.txt").write_text(
        f"[sglang.srt.plugins]\n{ENTRY_POINT} = {__name__}:install\n")
    return root
