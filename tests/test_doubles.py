"""Every test double is listed, with what it stands in for, in ``testkit.doubles.DOUBLES``."""

from __future__ import annotations

from pathlib import Path

from testkit.doubles import DOUBLES


def test_every_double_module_is_listed_and_every_listed_double_exists() -> None:
    folder = Path(__file__).resolve().parents[1] / "testkit" / "doubles"
    modules = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}
    assert modules == set(DOUBLES)
    for name, what in DOUBLES.items():
        assert what.strip(), name


def test_the_gpu_form_takes_mla_decode_from_the_named_aiter_tree_where_it_has_mla_py(
        tmp_path: Path) -> None:
    """The self-test's GPU form (``capture-safe``): aiter's own ``mla_decode_fwd`` from the tree
    that ``SGLANG_E2E_AITER_TREE`` names, where it holds ``aiter/mla.py``; otherwise no MLA
    kernel (and nothing without a named tree)."""
    import pytest

    from testkit.doubles.aiter_triton import installed_tree
    from testkit.doubles.server_plugin import gpu_mla

    tree = installed_tree()
    if tree is None or not (tree.root / "aiter" / "mla.py").is_file():
        pytest.skip("amd-aiter (with aiter/mla.py) is not installed: bash tools/env.sh")
    with_mla, without = tmp_path / "with", tmp_path / "without"
    for root in (with_mla, without):
        root.mkdir()
        (root / "AITER_ORIGIN").write_text("test tree\n")
    (with_mla / "aiter").symlink_to(tree.root / "aiter")
    (without / "aiter").mkdir()
    kernel = gpu_mla(str(with_mla))
    assert kernel is not None
    assert Path(kernel.__code__.co_filename).resolve() == (tree.root / "aiter/mla.py").resolve()
    stage1 = kernel.__globals__["aiter"].mla_decode_stage1_asm_fwd
    assert stage1.__module__ == "testkit.doubles.aiter_mla_gpu"
    assert gpu_mla(str(without)) is None
    assert gpu_mla(None) is None
