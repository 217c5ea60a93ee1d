"""The canary over the rest of sglang: every function outside ``GroupCoordinator`` that reaches
aiter's communicator is one the plugin knows, on the installed release; a planted one is named
by ``doctor`` with its file and function."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from sglang_aiter_plugin import _doctor
from sglang_aiter_plugin.fixes.collectives.readers import communicator_readers, known_as


def _sglang_root() -> Path:
    spec = importlib.util.find_spec("sglang")
    assert spec is not None
    assert spec.submodule_search_locations is not None
    return Path(next(iter(spec.submodule_search_locations)))


def test_every_reader_of_the_installed_release_is_known() -> None:
    unknown = [r for r in communicator_readers(_sglang_root()) if known_as(r) is None]
    assert unknown == [], (
        "this sglang reaches aiter's communicator outside GroupCoordinator where the plugin has "
        "not looked: read each, then list it in fixes/collectives/readers.py KNOWN (with why no "
        "capture under a condition registers through it) or make a fix cover it")


def _plant(root: Path, relative: str, source: str) -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    return path


def test_a_planted_reader_is_reported_with_its_file_and_function(tmp_path: Path) -> None:
    root = tmp_path / "sglang"
    _plant(root, "srt/models/deepseek_common/amd/deepseek_v4_fused_mhc.py",  # known
           "def _make_mhc_fusion(residual, coefficients, comm):\n"
           "    return comm.enable_register_for_capturing\n")
    _plant(root, "srt/layers/new_fusion.py",
           "from aiter.dist.device_communicators.custom_all_reduce import CustomAllreduce\n"
           "class Fused:\n"
           "    def choose(self, group):\n"
           "        comm = group.ca_comm\n"
           "        return comm.enable_register_for_capturing\n"
           "def run(comm, x):\n"
           "    return comm._ptr, comm._pool['input']\n")
    _plant(root, "srt/layers/unrelated.py",  # no communicator: _ptr of something else
           "def run(pool):\n    return pool._ptr\n")
    _plant(root, "srt/distributed/device_communicators/custom_all_reduce.py",  # a communicator
           "class CustomAllreduce:\n    def close(self):\n        return self._ptr, self.ca_comm\n")
    _plant(root, "srt/distributed/parallel_state.py",  # GroupCoordinator: the calls canary's
           "class GroupCoordinator:\n    def all_reduce(self, x):\n        return self.ca_comm\n")
    _plant(root, "test/test_fusion.py", "def test_it(group):\n    return group.ca_comm\n")
    report = _doctor.Report()
    _doctor._communicator_readers(report, str(root))
    new = root / "srt/layers/new_fusion.py"
    assert [(c.name, c.level, c.summary) for c in report.checks] == [
        ("collective readers", "warn", f"Fused.choose ({new}:4) reaches aiter's communicator "
         "(ca_comm, enable_register_for_capturing) outside GroupCoordinator, which the plugin "
         "does not know: it may capture a registered collective that no collective fix sees; "
         "please report this sglang release"),
        ("collective readers", "warn", f"run ({new}:7) reaches aiter's communicator (_ptr, "
         "_pool) outside GroupCoordinator, which the plugin does not know: it may capture a "
         "registered collective that no collective fix sees; please report this sglang "
         "release")]


def test_the_row_says_every_reader_of_the_installed_release_is_known() -> None:
    report = _doctor.Report()
    _doctor._communicator_readers(report)
    count = len(communicator_readers(_sglang_root()))
    assert [(c.name, c.level, c.summary) for c in report.checks] == [
        ("collective readers", "ok", f"all {count} functions outside GroupCoordinator that "
         "reach aiter's communicator are known to the plugin")]
