"""What the tests, the GPU scripts and the benchmarks share (not part of the installed package).

* :mod:`testkit.doubles` -- the test doubles, one module per thing that cannot exist without ROCm
  or a server;
* :mod:`testkit.sglang_setup` -- a backend configured through sglang's own argument parsing;
* :mod:`testkit.decode_batch` -- a decode batch and its metadata call, for CPU and GPU alike;
* :mod:`testkit.subproc` -- running a script as ``__main__`` in a fresh interpreter.

Run the scripts from the repository root (``python -m benchmarks.startup``, or with the root on
``PYTHONPATH``) so that this package is importable; nothing edits ``sys.path``.
"""
