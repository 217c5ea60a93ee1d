"""Run Python in a fresh interpreter, as sglang starts its processes, and read back JSON.

Every such interpreter first imports ``sglang`` (sglang's plugin loader lives in it), which takes
most of a child's time (4-8 s on a 2-CPU machine). So a child is forked from a *warm* interpreter
that was started with the same environment and has run exactly ``PRELUDE`` and ``import sglang``
(no plugin, no pluggy, none of the modules the plugin waits for), wherever the two environments
differ only in variables that ``import sglang`` did not read: sglang's and the plugin's own
settings (``SGLANG_*``), which their Python code reads through ``os.environ`` after that import.
The warm interpreter records every variable its ``import sglang`` reads by name, so a setting read
at import (``SGLANG_PLATFORM`` on 0.5.23) starts a really fresh interpreter instead, as does any
other difference (``PYTHONPATH``, ``TRITON_INTERPRET``...: each such environment gets its own warm
interpreter). The fork gets the child's environment, working directory, ``-c`` argv and an empty
``__main__`` before its code runs, and exits as an interpreter does (non-daemon threads joined,
``atexit`` run). Walks over the whole environment at import are not reads by name: sglang's
renaming of deprecated ``SGL_*`` names and tqdm's scan for ``TQDM_*`` touch no variable a test
sets. ``SGLANG_TEST_FRESH_CHILDREN=1`` starts every child fresh.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import textwrap
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

__all__ = ["PRELUDE", "Result", "run_main_script", "run_python"]

PRELUDE = 'import sys, json\nsys.modules.setdefault("aiter", None)\n'

_SERVER = PRELUDE + textwrap.dedent('''
    import atexit, builtins, importlib, os, signal, tempfile, threading, traceback, types

    read = set()

    class Recording(type(os.environ)):  # every variable the import below reads by name
        def __getitem__(self, key):
            caller = sys._getframe(1).f_code
            if not (caller.co_name == "__iter__" and "_collections_abc" in caller.co_filename):
                read.add(key)  # a read by name, not a step of a walk over items()
            return super().__getitem__(key)

        def __contains__(self, key):
            read.add(key)
            return super().__contains__(key)

    plain, os.environ.__class__ = type(os.environ), Recording
    import sglang  # what every child does first
    os.environ.__class__ = plain

    def child(request, out, err):
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        sys.argv = ["-c"]
        main = types.ModuleType("__main__")
        main.__builtins__ = builtins
        sys.modules["__main__"] = main
        importlib.invalidate_caches()
        signal.alarm(request["timeout"])
        code = 0
        try:
            exec(compile(request["code"], "<string>", "exec"), main.__dict__)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (exc.code is not None)
            if not isinstance(exc.code, (int, type(None))):
                print(exc.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
            code = 1
        for thread in threading.enumerate():
            if thread is not threading.current_thread() and not thread.daemon:
                thread.join()
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

    replies = os.fdopen(os.dup(1), "w")
    replies.write(json.dumps(sorted(read)) + "\\n")
    replies.flush()
    for line in sys.stdin:
        request = json.loads(line)
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            pid = os.fork()
            if pid == 0:
                child(request, out, err)
            status = os.waitpid(pid, 0)[1]
            out.seek(0)
            err.seek(0)
            reply = {"status": status, "stdout": out.read().decode(errors="replace"),
                     "stderr": err.read().decode(errors="replace")}
        replies.write(json.dumps(reply) + "\\n")
        replies.flush()
    ''')


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str

    @property
    def data(self) -> Any:
        lines = [ln for ln in self.stdout.splitlines() if ln.startswith("RESULT ")]
        assert lines, f"no RESULT line\nstdout:\n{self.stdout}\nstderr:\n{self.stderr[-4000:]}"
        return json.loads(lines[-1][len("RESULT ") :])


def _is_setting(name: str) -> bool:
    """sglang's and the plugin's settings, read by Python code through ``os.environ``, and the
    test pytest runs (``PYTEST_CURRENT_TEST``, which it sets for every test)."""
    return name.startswith("SGLANG_") or name == "PYTEST_CURRENT_TEST"


class _WarmInterpreter:
    """An interpreter that has imported sglang with ``env`` and forks children on request."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self._lock = threading.Lock()
        self._proc = subprocess.Popen([sys.executable, "-c", _SERVER], env=env,
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, text=True)
        self._read: set[str] | None = None  # the variables `import sglang` read

    def _reply(self) -> Any:
        stdout: IO[str] = self._proc.stdout  # type: ignore[assignment]
        line = stdout.readline()
        if not line:
            self.close()
            raise RuntimeError("the warm interpreter died; rerun with "
                               "SGLANG_TEST_FRESH_CHILDREN=1 to see why")
        return json.loads(line)

    def fits(self, env: dict[str, str]) -> bool:
        """Whether a child with ``env`` would have imported sglang exactly as this one did."""
        with self._lock:
            if self._read is None:
                try:
                    self._read = set(self._reply())
                except RuntimeError:  # its `import sglang` failed, without the child's settings
                    return False
        differ = {k for k in env.keys() | self.env.keys() if env.get(k) != self.env.get(k)}
        return all(_is_setting(k) and k not in self._read for k in differ)

    def run(self, code: str, env: dict[str, str], timeout: int) -> Result:
        request = {"code": code, "env": env, "cwd": os.getcwd(), "timeout": timeout}
        with self._lock:
            stdin: IO[str] = self._proc.stdin  # type: ignore[assignment]
            stdin.write(json.dumps(request) + "\n")
            stdin.flush()
            reply = self._reply()
        status: int = reply["status"]
        if os.WIFSIGNALED(status) and os.WTERMSIG(status) == 14:  # SIGALRM: the timeout
            raise subprocess.TimeoutExpired(["<forked child>"], timeout, reply["stdout"],
                                            reply["stderr"])
        returncode = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status)
        return Result(returncode, reply["stdout"], reply["stderr"])

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()


_KEEP = 3  # warm interpreters kept at once (each holds sglang's imports, about 1 GiB)
_warm: OrderedDict[frozenset[tuple[str, str]], _WarmInterpreter] = OrderedDict()
_warm_lock = threading.Lock()


def _warm_for(env: dict[str, str]) -> _WarmInterpreter:
    """The warm interpreter for ``env`` without its settings, started on first use."""
    key = frozenset((k, v) for k, v in env.items() if not _is_setting(k))
    with _warm_lock:
        warm = _warm.pop(key, None)
        if warm is None or warm._proc.poll() is not None:
            warm = _WarmInterpreter(dict(key))
        _warm[key] = warm
        while len(_warm) > _KEEP:
            _warm.popitem(last=False)[1].close()
        return warm


@atexit.register
def _close_all() -> None:
    for warm in _warm.values():
        warm.close()


def run_python(code: str, env: dict[str, str] | None = None, timeout: int = 600) -> Result:
    """Run ``code`` (which prints ``RESULT <json>``) with this interpreter and ``env`` overrides."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_AITER_EXT")}
    full_env.pop("SGLANG_PLUGINS", None)
    full_env.pop("SGLANG_PLATFORM", None)
    full_env.update(env or {})
    script = PRELUDE + textwrap.dedent(code)
    if os.environ.get("SGLANG_TEST_FRESH_CHILDREN") != "1":
        warm = _warm_for(full_env)
        if warm.fits(full_env):
            return warm.run(script, full_env, timeout)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=full_env, timeout=timeout)
    return Result(proc.returncode, proc.stdout, proc.stderr)


def run_main_script(directory: Path, code: str, env: dict[str, str] | None = None) -> Result:
    """Run ``code`` as ``__main__`` from a file: ``spawn`` children re-import the main module."""
    script = directory / "main_script.py"
    script.write_text(PRELUDE + textwrap.dedent(code))
    return run_python(f"import runpy; runpy.run_path({str(script)!r}, run_name='__main__')", env)
