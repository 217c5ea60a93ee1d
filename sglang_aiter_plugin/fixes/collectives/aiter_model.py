"""What aiter's communicator registers during a stream capture, method by method.

The probe hands sglang's methods this stand-in for aiter's ``CustomAllreduce`` while a capture is
simulated. Each method sglang may call writes down whether that call would register the caller's
tensors (record them for IPC export when the capture ends), following aiter's documented
behaviour (``aiter/dist/device_communicators/custom_all_reduce.py``):

* an explicit ``registered=`` argument (``reduce_scatter``, ``fused_ar_rms``,
  ``fused_ar_rms_per_group_quant``) is what happens;
* ``all_gather_reg`` registers, ``all_gather_unreg`` copies into aiter's own buffer;
* ``custom_all_reduce``, ``custom_all_gather`` and ``custom_reduce_scatter`` follow the
  communicator's ``enable_register_for_capturing``;
* ``custom_fused_ar_rms`` and ``custom_fused_ar_rms_per_group_quant`` register whatever the
  switches (aiter passes ``registered=True`` during capture).

Nothing runs: no kernel, no process group. The gates sglang consults first (``disabled``,
``should_custom_ar``, ...) all say yes.
"""

from __future__ import annotations

from typing import Any

__all__ = ["AiterCall", "CaptureCommunicator"]

WORLD_SIZE = 2


class AiterCall:
    """One call sglang made on the communicator, and whether it registers during capture."""

    __slots__ = ("method", "registered")

    def __init__(self, method: str, registered: bool) -> None:
        self.method = method
        self.registered = registered


class CaptureCommunicator:
    """aiter's communicator as sglang sees it while a stream captures (see the module doc)."""

    def __init__(self, *, register_flag: bool) -> None:
        self.disabled = False
        self._IS_CAPTURING = True
        self.enable_register_for_capturing = register_flag
        self.world_size = WORLD_SIZE
        self.calls: list[AiterCall] = []

    def _record(self, method: str, registered: Any) -> None:
        self.calls.append(AiterCall(method, bool(registered)))

    # gates: sglang asks these before it takes the AITER path
    def should_custom_ar(self, *args: Any, **kwargs: Any) -> bool:
        return True

    def should_custom_ag(self, *args: Any, **kwargs: Any) -> bool:
        return True

    def should_custom_rs(self, *args: Any, **kwargs: Any) -> bool:
        return True

    # all-reduce
    def custom_all_reduce(self, inp: Any, *args: Any, **kwargs: Any) -> Any:
        self._record("custom_all_reduce", self.enable_register_for_capturing)
        return inp

    # reduce-scatter
    def reduce_scatter(self, inp: Any, out: Any, *args: Any, registered: bool = False,
                       **kwargs: Any) -> None:
        self._record("reduce_scatter", registered)

    def custom_reduce_scatter(self, inp: Any, out: Any, *args: Any, **kwargs: Any) -> Any:
        self._record("custom_reduce_scatter", self.enable_register_for_capturing)
        return out

    # all-gather
    def all_gather_reg(self, inp: Any, out: Any = None, *args: Any, **kwargs: Any) -> Any:
        self._record("all_gather_reg", True)
        return out

    def all_gather_unreg(self, inp: Any, out: Any = None, *args: Any, **kwargs: Any) -> Any:
        self._record("all_gather_unreg", False)
        return out

    def custom_all_gather(self, inp: Any, *args: Any, **kwargs: Any) -> Any:
        self._record("custom_all_gather", self.enable_register_for_capturing)
        return inp

    # fused all-reduce + RMSNorm
    def custom_fused_ar_rms(self, inp: Any, residual: Any, *args: Any, **kwargs: Any) -> Any:
        self._record("custom_fused_ar_rms", True)
        return inp, residual

    def fused_ar_rms(self, inp: Any, residual: Any, *args: Any, registered: bool = False,
                     **kwargs: Any) -> Any:
        self._record("fused_ar_rms", registered)
        return inp, residual

    def custom_fused_ar_rms_per_group_quant(self, inp: Any, residual: Any, *args: Any,
                                            **kwargs: Any) -> Any:
        self._record("custom_fused_ar_rms_per_group_quant", True)
        return inp, residual, inp

    def fused_ar_rms_per_group_quant(self, inp: Any, residual: Any, *args: Any,
                                     registered: bool = False, **kwargs: Any) -> Any:
        self._record("fused_ar_rms_per_group_quant", registered)
        return inp, residual, inp
