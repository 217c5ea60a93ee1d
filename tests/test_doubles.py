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


def test_aiters_own_mla_py_loads_with_only_its_hip_stage_1_a_double() -> None:
    """``aiter_mla_gpu.load_mla`` (the ``mla`` server double, the GPU evidence): the module is
    aiter's own file, its ``get_meta_param`` aiter's cache, its stage 1 the torch double."""
    import pytest

    from testkit.doubles.aiter_mla_gpu import load_mla
    from testkit.doubles.aiter_triton import installed_tree

    tree = installed_tree()
    if tree is None or not (tree.root / "aiter" / "mla.py").is_file():
        pytest.skip("amd-aiter (with aiter/mla.py) is not installed: bash tools/env.sh")
    module = load_mla(tree)
    assert Path(str(module.__file__)).resolve() == (tree.root / "aiter/mla.py").resolve()
    assert module.get_meta_param.cache_parameters()["maxsize"] is not None  # aiter's lru_cache
    assert module.aiter.mla_decode_stage1_asm_fwd.__module__ == "testkit.doubles.aiter_mla_gpu"
