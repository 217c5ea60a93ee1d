"""What the tests, the GPU scripts and the benchmarks share (not part of the installed package).

* :mod:`testkit.doubles` -- the test doubles, one module per thing that cannot exist without ROCm
  or a server;
* :mod:`testkit.sglang_setup` -- the self-test's sglang configuration
  (:mod:`sglang_aiter_plugin.selftest`, which also holds the decode batches, the MLP-sync batches
  and the torch references the tests use) with the import double it needs here;
* :mod:`testkit.subproc` -- running a script as ``__main__`` in a fresh interpreter.

Run the scripts from the repository root (``python -m benchmarks.startup``, or with the root on
``PYTHONPATH``) so that this package is importable; nothing edits ``sys.path``.
"""
