"""A server selecting ``aiter-ext`` on a machine that cannot run aiter (here: without the tests'
ROCm host double) stops with the plugin's message before loading weights, leaving nothing."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from testkit.server import ServerFailed, launch

pytestmark = [pytest.mark.slow, pytest.mark.e2e]


def test_aiter_ext_without_rocm_stops_before_loading_weights(
        tmp_path: Path, checkpoint: Path, e2e_version: object) -> None:
    start = time.monotonic()
    server = launch(checkpoint, "aiter-ext", tmp_path, doubles="aiter,fill-value", wait=False)
    try:
        with pytest.raises(ServerFailed):
            server.wait_ready()
    finally:
        server.stop()  # raises if a process or a listening port is left
    log = server.log()
    assert "AiterUnavailableError: --attention-backend aiter-ext cannot run here: this torch" in log
    assert "is not a ROCm build" in log
    assert "Load weight" not in log
    assert "Scheduler" not in log
    assert server.proc.returncode not in (0, None)
    assert len(server.seen) <= 2, server.seen  # the launcher (and at most a resource tracker)
    print(f"refused in {time.monotonic() - start:.1f} s, exit status {server.proc.returncode}")
