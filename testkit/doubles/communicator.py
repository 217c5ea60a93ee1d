"""Double of aiter's ``CustomAllreduce`` for CPU tests: records every collective call.

It carries the attributes sglang's AITER paths read (``disabled``, ``_IS_CAPTURING``, the
``should_custom_*`` gates) and, unless told otherwise, aiter's ``enable_register_for_capturing``
(``register_flag=None`` leaves it out, as an aiter release without it would). Every call is
recorded as ``(method, registered)`` following aiter's documented behaviour
(``aiter/dist/device_communicators/custom_all_reduce.py``): explicit ``registered=`` arguments
as given, ``all_gather_reg`` registers, ``custom_all_reduce`` follows the flag during stream
capture, ``custom_fused_ar_rms*`` register during stream capture and, in warm-up (capture mode,
stream not capturing), return zeros without a collective. Outputs are filled with :data:`MARK`
so a test can tell a collective from warm-up zeros.

:class:`RecordingCommunicator` has the unregistered fused forms (``fused_ar_rms``,
``fused_ar_rms_per_group_quant``); :class:`CommunicatorWithoutUnregisteredFused` lacks them.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MARK", "CommunicatorWithoutUnregisteredFused", "RecordingCommunicator"]

MARK = 7.0


def _stream_capturing() -> bool:
    import torch

    return bool(torch.cuda.is_current_stream_capturing())


class CommunicatorWithoutUnregisteredFused:
    def __init__(self, *, capturing: bool, register_flag: bool | None = True) -> None:
        self.disabled = False
        self._IS_CAPTURING = capturing
        if register_flag is not None:
            self.enable_register_for_capturing = register_flag
        self.calls: list[tuple[str, bool]] = []

    @property
    def registered(self) -> list[bool]:
        return [registered for _, registered in self.calls]

    def _flag(self) -> bool:
        return bool(getattr(self, "enable_register_for_capturing", True))

    def should_custom_ar(self, inp: Any, *args: Any, **kwargs: Any) -> bool:
        return True

    def should_custom_ag(self, inp: Any) -> bool:
        return True

    def custom_all_reduce(self, inp: Any) -> Any:
        if self._IS_CAPTURING and not _stream_capturing():
            return inp.new_zeros(inp.shape)
        self.calls.append(("custom_all_reduce",
                           self._flag() if self._IS_CAPTURING else False))
        return inp.new_full(inp.shape, MARK)

    def reduce_scatter(self, inp: Any, out: Any, dim: int = 0, *, registered: bool = False) -> None:
        self.calls.append(("reduce_scatter", registered))
        out.fill_(MARK)

    def all_gather_reg(self, inp: Any, out: Any = None, dim: int = 0) -> Any:
        self.calls.append(("all_gather_reg", True))
        return out.fill_(MARK)

    def all_gather_unreg(self, inp: Any, out: Any = None, dim: int = 0) -> Any:
        self.calls.append(("all_gather_unreg", False))
        return out.fill_(MARK)

    def _fused(self, name: str, inp: Any, residual: Any, n: int) -> Any:
        if self._IS_CAPTURING and not _stream_capturing():
            return tuple(inp.new_zeros(inp.shape) for _ in range(n))  # aiter's warm-up
        self.calls.append((name, self._IS_CAPTURING))  # registered during stream capture
        return tuple(inp.new_full(inp.shape, MARK) for _ in range(n))

    def custom_fused_ar_rms(self, input: Any, residual_inp: Any, weight: Any, eps: float,
                            use_1stage: bool, out_hidden_dim: int = 0,
                            gemma_norm: bool = False) -> Any:
        return self._fused("custom_fused_ar_rms", input, residual_inp, 2)

    def custom_fused_ar_rms_per_group_quant(self, input: Any, residual_inp: Any, weight: Any,
                                            eps: float, group_size: int = 128,
                                            use_1stage: bool = False, emit_bf16: bool = False,
                                            transpose_scale: bool = False) -> Any:
        return self._fused("custom_fused_ar_rms_per_group_quant", input, residual_inp,
                           4 if emit_bf16 else 3)


class RecordingCommunicator(CommunicatorWithoutUnregisteredFused):
    def fused_ar_rms(self, inp: Any, res_inp: Any, *, w: Any, eps: float,
                     registered: bool = False, use_1stage: bool = False, **kwargs: Any) -> Any:
        self.calls.append(("fused_ar_rms", registered))
        return inp.new_full(inp.shape, MARK), inp.new_full(inp.shape, MARK)

    def fused_ar_rms_per_group_quant(self, inp: Any, res_inp: Any, *, w: Any, eps: float,
                                     group_size: int = 128, registered: bool = False,
                                     use_1stage: bool = False, emit_bf16: bool = False,
                                     transpose_scale: bool = False) -> Any:
        self.calls.append(("fused_ar_rms_per_group_quant", registered))
        n = 4 if emit_bf16 else 3
        return tuple(inp.new_full(inp.shape, MARK) for _ in range(n))
