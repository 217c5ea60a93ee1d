"""IMPORT STUB for sgl_kernel -- NOT the real sglang-kernel.

Lets sglang's modules import on a CUDA machine without the (huge) sglang-kernel wheel.
Every attribute / submodule exists; calling anything raises NotImplementedError.
Real CUDA kernels from sgl_kernel are therefore unavailable; triton kernels in sglang work.

Three answers, so that a real server with decode CUDA graphs runs on the stub:

* ``sgl_kernel.utils.is_arch_support_pdl()`` is False (no programmatic dependent launch:
  sglang's Triton attention backend asks at construction);
* ``sgl_kernel.weak_ref_tensor(t)`` is ``t`` itself (graph capture keeps weak references to its
  outputs; a strong one keeps the same tensor alive a little longer and computes the same);
* ``torch.library.register_fake("sgl_kernel::...")`` is skipped (sglang 0.5.11-0.5.12 register
  fake implementations of the real library's operators at import; the stub defines none).
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


def weak_ref_tensor(tensor):
    return tensor


def _is_arch_support_pdl(*args, **kwargs):
    return False


_ANSWERS = {__name__ + ".utils": {"is_arch_support_pdl": _is_arch_support_pdl}}


def _skip_own_fake_registrations():
    try:
        import torch.library
    except ImportError:
        return
    original = torch.library.register_fake
    if getattr(original, "_sgl_kernel_stub", False):
        return

    def register_fake(op, func=None, /, **kwargs):
        if isinstance(op, str) and op.startswith("sgl_kernel::"):
            return func if func is not None else (lambda f: f)
        return original(op, func, **kwargs) if func is not None else original(op, **kwargs)

    register_fake._sgl_kernel_stub = True
    torch.library.register_fake = register_fake


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
        mod.__dict__.update(_ANSWERS.get(spec.name, {}))
        return mod

    def exec_module(self, module):
        pass


sys.meta_path.append(_StubFinder())
_skip_own_fake_registrations()
