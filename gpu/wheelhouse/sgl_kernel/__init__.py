"""IMPORT STUB for sgl_kernel -- NOT the real sglang-kernel.

Lets sglang's modules import on a CUDA machine without the (huge) sglang-kernel wheel.
Every attribute / submodule exists; calling anything raises NotImplementedError.
Real CUDA kernels from sgl_kernel are therefore unavailable; triton kernels in sglang work.
"""
import importlib.abc
import importlib.machinery
import sys
import types

__version__ = "0.0.0+importstub"
IS_IMPORT_STUB = True


class _Missing:
    def __init__(self, name):
        self._name = name

    def __call__(self, *args, **kwargs):
        raise NotImplementedError(
            f"{self._name}: sgl_kernel is an import stub here (real sglang-kernel not installed)"
        )

    def __getattr__(self, attr):
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        return _Missing(f"{self._name}.{attr}")

    def __mro_entries__(self, bases):
        return (object,)

    def __repr__(self):
        return f"<sgl_kernel import stub {self._name}>"


def _module_getattr(modname):
    def __getattr__(attr):
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        return _Missing(f"{modname}.{attr}")

    return __getattr__


__getattr__ = _module_getattr(__name__)


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith(__name__ + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        mod = types.ModuleType(spec.name)
        mod.__path__ = []
        mod.__dict__["__getattr__"] = _module_getattr(spec.name)
        mod.__dict__["IS_IMPORT_STUB"] = True
        return mod

    def exec_module(self, module):
        pass


sys.meta_path.append(_StubFinder())
