"""Every branch x switch x communicator of each hooked collective, through ``load_plugins()``.

The wrapped method must take the unregistered path during a stream capture whenever TMS, copy-in
or the communicator flag says so, and otherwise do exactly what sglang does; sglang's own method
below the wrapper must do what the release is known to do (so the evidence compares against the
real upstream behaviour, not an assumption).
"""

from __future__ import annotations

import pytest
from packaging.version import Version

from sglang_aiter_plugin.fixes.collectives.probe import Condition
from testkit.collective_facts import NEWEST_KNOWN, honoured_upstream
from tests.fixes.collectives.scenario import (
    METHODS,
    cases,
    child_data,
    expected,
    honoured_here,
    unsafe,
    wrapped,
)

COPY_IN = pytest.mark.parametrize("copy_in", [False, True], ids=["copy-in-off", "copy-in-on"])


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "case" in metafunc.fixturenames:
        from sglang_aiter_plugin._sglang import installed_sglang_version

        version = installed_sglang_version()
        found = cases(version) if version is not None else []
        metafunc.parametrize("case", found, ids=["|".join(map(str, c)) for c in found])


@COPY_IN
def test_hooked_method_takes_the_safe_path(case: tuple[str, str, bool, bool | None, str],
                                           copy_in: bool, sglang_version: Version) -> None:
    method, branch, tms, flag, kind = case
    got = child_data(copy_in)["cases"][f"{method}|{branch}|{tms}|{flag}|{kind}"]["hooked"]
    all_honoured = honoured_here(METHODS[method], frozenset(Condition))
    must = unsafe(tms=tms, copy_in=copy_in, flag=flag, honoured=all_honoured)
    if METHODS[method] == "capture-all-reduce" and flag is None:
        must = False  # an aiter without the flag registers whatever it is told (and sglang
        # cannot build it: it passes enable_register_for_capturing)
    want = expected(method, branch, kind=kind, version=sglang_version, unsafe=must)
    assert got == want


@COPY_IN
def test_sglangs_own_method_does_what_the_release_is_known_to_do(
    case: tuple[str, str, bool, bool | None, str], copy_in: bool, sglang_version: Version
) -> None:
    if sglang_version > NEWEST_KNOWN:
        pytest.skip(f"no recorded facts for sglang {sglang_version}")
    method, branch, tms, flag, kind = case
    honoured = honoured_here(METHODS[method], honoured_upstream(METHODS[method], sglang_version))
    got = child_data(copy_in)["cases"][f"{method}|{branch}|{tms}|{flag}|{kind}"]["upstream"]
    want = expected(method, branch, kind=kind, version=sglang_version,
                    unsafe=unsafe(tms=tms, copy_in=copy_in, flag=flag, honoured=honoured))
    assert got == want


def test_each_hooked_method_has_exactly_one_wrapper(sglang_version: Version) -> None:
    data = child_data(False)
    wanted = {m for m, *_ in cases(sglang_version)}
    assert {m: n for m, n in data["layers"].items() if m in wanted} == dict.fromkeys(wanted, 1)


def test_only_the_out_of_place_all_reduce_is_wrapped_and_nothing_goes_through_the_hook_registry(
        sglang_version: Version) -> None:
    data = child_data(False)
    layers = int(wrapped("capture-all-reduce", sglang_version))
    assert data["all_reduce_layers"] == {"all_reduce": 0, "_all_reduce_out_place": layers}
    assert data["registry"] == []
