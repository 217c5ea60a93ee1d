"""Double of aiter's ``CustomAllreduce`` for CPU tests: records every collective call.

It follows ``aiter/dist/device_communicators/custom_all_reduce.py`` at ROCm/aiter ``e4048607``
(2026-08-22). It carries the attributes sglang's AITER paths read (``disabled``,
``_IS_CAPTURING``, ``world_size``, the ``should_custom_*`` gates, which say yes unless a test
says otherwise) and, unless told otherwise, ``enable_register_for_capturing``
(``register_flag=None`` leaves it out, as an aiter without it would). Every collective is
recorded as ``(method, registered)`` as aiter runs it:

* ``registered=`` as given; ``all_gather_reg`` registers, ``all_gather_unreg`` does not;
* ``custom_all_reduce(input, use_new, open_fp8_quant)`` registers during stream capture per the
  flag and returns zeros in warm-up (capture mode, stream not capturing); ``custom_all_gather``
  and ``custom_reduce_scatter`` call ``all_gather_reg`` / ``reduce_scatter(registered=flag)``
  during stream capture and the unregistered kernel otherwise (warm-up included: a real
  collective);
* the ``custom_fused_*`` calls register during stream capture whatever the flag and return zeros
  (``custom_fused_qknorm_ar*``: empty tensors) in warm-up;
* gates: ``custom_all_reduce`` and ``custom_fused_ar_rms*`` give ``None`` with no collective where
  the communicator is disabled or ``should_custom_ar`` says no, ``custom_reduce_scatter`` where
  ``should_custom_rs`` says no; ``custom_fused_qknorm_ar*`` give empty outputs where disabled;
* ``custom_reduce_scatter`` returns ``None`` even on success (``reduce_scatter`` returns nothing);
* ``all_gather_reg`` / ``all_gather_unreg`` allocate the output where ``out`` is ``None``
  (``world_size`` inputs along ``dim``), and ``custom_all_gather`` hands them an integer input
  viewed as floats of the same size (aiter's kernel knows float types only) and views the
  output back.

It also has what sglang's ``all_reduce_mhc_post`` (0.5.21+) reads of it (``device``, ``_ptr``,
``_pool["input"]``'s ``data_ptr`` and ``max_size``) and aiter's ``capture()`` scope, which turns
capture mode on for its block.

Outputs are filled with :data:`MARK` so a test can tell a collective from warm-up zeros.
``custom_fused_ar_rms`` and ``custom_fused_ar_rms_per_group_quant`` record under their own names
(both classes have them); the other fused calls record the form they run (``fused_ar_rms``,
``fused_qknorm_ar``, ...) with the ``registered`` they pass it.
:class:`RecordingCommunicator` is aiter at ``e4048607``, with the unregistered fused forms
(``fused_ar_rms``, ``fused_ar_rms_per_group_quant``, ``fused_ar_rms_mxfp4_quant``,
``fused_qknorm_ar[_rope]``) and the fused calls that use them;
:class:`CommunicatorWithoutUnregisteredFused` is an older aiter with only ``custom_fused_ar_rms``
and ``custom_fused_ar_rms_per_group_quant``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, NamedTuple

import torch

__all__ = ["AITER_COMMIT", "MARK", "CommunicatorWithoutUnregisteredFused",
           "RecordingCommunicator"]

AITER_COMMIT = "e4048607"
MARK = 7.0
WORLD_SIZE = 2
_INT_AS_FLOAT = {torch.int64: torch.float64, torch.int32: torch.float32,
                 torch.int16: torch.float16}


class _Buffer(NamedTuple):
    data_ptr: int
    max_size: int


def _stream_capturing() -> bool:
    return bool(torch.cuda.is_current_stream_capturing())


def _quant_outputs(inp: Any, emit_bf16: bool) -> tuple[Any, ...]:
    return tuple(inp.new_full(inp.shape, MARK) for _ in range(4 if emit_bf16 else 3))


def _qkv_outputs(qkv_in: Any, q_w: Any, k_w: Any, fill: float | None) -> tuple[Any, ...]:
    """(q, k, v) of one qk-norm all-reduce; ``fill=None``: unfilled, as aiter's warm-up gives."""
    q, k = q_w.shape[-1], k_w.shape[-1]
    widths = (q, k, qkv_in.shape[1] - q - k)
    made = tuple(qkv_in.new_empty((qkv_in.shape[0], width)) for width in widths)
    return made if fill is None else tuple(t.fill_(fill) for t in made)


class CommunicatorWithoutUnregisteredFused:
    def __init__(self, *, capturing: bool, register_flag: bool | None = True) -> None:
        self.disabled = False
        self._IS_CAPTURING = capturing
        self.world_size = WORLD_SIZE
        if register_flag is not None:
            self.enable_register_for_capturing = register_flag
        self.calls: list[tuple[str, bool]] = []
        # what sglang's all_reduce_mhc_post (0.5.21+) reads besides the flag: the device, the
        # C++ communicator's handle, the pre-registered input buffer (address and size)
        self.device = torch.device("cpu")
        self._ptr = 0x5EED
        self._pool = {"input": _Buffer(data_ptr=0xB0FF, max_size=1 << 20)}

    @contextlib.contextmanager
    def capture(self) -> Iterator[None]:
        """aiter's capture scope (``GroupCoordinator.graph_capture`` enters it): capture mode
        for the block."""
        self._IS_CAPTURING = True
        try:
            yield
        finally:
            self._IS_CAPTURING = False

    @property
    def registered(self) -> list[bool]:
        return [registered for _, registered in self.calls]

    def _flag(self) -> bool:
        return bool(getattr(self, "enable_register_for_capturing", True))

    def _warm_up(self) -> bool:
        """Capture mode without a capturing stream: aiter's warm-up."""
        return self._IS_CAPTURING and not _stream_capturing()

    def should_custom_ar(self, inp: Any, prefill_support: bool = False) -> bool:
        return True

    def should_custom_ag(self, inp: Any) -> bool:
        return True

    def should_custom_rs(self, inp: Any, dim: int) -> bool:
        return bool(self.should_custom_ar(inp))

    def custom_all_reduce(self, input: Any, use_new: bool = True,
                          open_fp8_quant: bool = False) -> Any:
        if self.disabled or not self.should_custom_ar(input):
            return None
        if self._warm_up():
            return input.new_zeros(input.shape)
        self.calls.append(("custom_all_reduce",
                           self._flag() if self._IS_CAPTURING else False))
        return input.new_full(input.shape, MARK)

    def reduce_scatter(self, inp: Any, out: Any, dim: int = 0, *, registered: bool = False) -> None:
        self.calls.append(("reduce_scatter", registered))
        out.fill_(MARK)

    def custom_reduce_scatter(self, input: Any, output: Any, dim: int = 0) -> None:
        if self.disabled or not self.should_custom_rs(input, dim):
            return None
        capturing = self._IS_CAPTURING and _stream_capturing()
        self.reduce_scatter(input, output, dim, registered=capturing and self._flag())
        return None  # aiter returns reduce_scatter's nothing

    def _gathered_out(self, inp: Any, out: Any, dim: int) -> Any:
        if out is not None:
            return out
        if dim == 0:
            shape = (inp.shape[0] * self.world_size, *inp.shape[1:])
        elif dim in (-1, inp.dim() - 1):
            shape = (*inp.shape[:-1], inp.shape[-1] * self.world_size)
        else:
            shape = (inp.numel() * self.world_size,)
        return inp.new_empty(shape)

    def all_gather_reg(self, inp: Any, out: Any = None, dim: int = 0) -> Any:
        out = self._gathered_out(inp, out, dim)
        self.calls.append(("all_gather_reg", True))
        return out.fill_(MARK)

    def all_gather_unreg(self, inp: Any, out: Any = None, dim: int = 0) -> Any:
        out = self._gathered_out(inp, out, dim)
        self.calls.append(("all_gather_unreg", False))
        return out.fill_(MARK)

    def custom_all_gather(self, inp: Any, dim: int = 0) -> Any:
        view = _INT_AS_FLOAT.get(inp.dtype, inp.dtype)
        if self._IS_CAPTURING and _stream_capturing() and self._flag():
            out = self.all_gather_reg(inp.view(view), dim=dim)
        else:
            out = self.all_gather_unreg(inp.view(view), dim=dim)
        return out.view(inp.dtype)

    def _fused(self, name: str, inp: Any, n: int) -> Any:
        if self.disabled or not self.should_custom_ar(inp):
            return None
        if self._warm_up():
            return tuple(inp.new_zeros(inp.shape) for _ in range(n))  # aiter's warm-up
        self.calls.append((name, self._IS_CAPTURING))  # registered during stream capture
        return tuple(inp.new_full(inp.shape, MARK) for _ in range(n))

    def custom_fused_ar_rms(self, input: Any, residual_inp: Any, weight: Any, eps: float,
                            use_1stage: bool, out_hidden_dim: int = 0,
                            gemma_norm: bool = False) -> Any:
        return self._fused("custom_fused_ar_rms", input, 2)

    def custom_fused_ar_rms_per_group_quant(self, input: Any, residual_inp: Any, weight: Any,
                                            eps: float, group_size: int = 128,
                                            use_1stage: bool = False, emit_bf16: bool = False,
                                            transpose_scale: bool = False) -> Any:
        return self._fused("custom_fused_ar_rms_per_group_quant", input, 4 if emit_bf16 else 3)


class RecordingCommunicator(CommunicatorWithoutUnregisteredFused):
    def fused_ar_rms(self, inp: Any, res_inp: Any, *, res_out: Any = None, out: Any = None,
                     scale_out: Any = None, w: Any, eps: float, registered: bool = False,
                     use_1stage: bool = False, post_per_token_quant: bool = False,
                     out_hidden_dim: int = 0, gemma_norm: bool = False,
                     emit_bf16: bool = False) -> Any:
        self.calls.append(("fused_ar_rms", registered))
        if post_per_token_quant:
            return _quant_outputs(inp, emit_bf16)
        return inp.new_full(inp.shape, MARK), inp.new_full(inp.shape, MARK)

    def fused_ar_rms_per_group_quant(self, inp: Any, res_inp: Any, *, w: Any, eps: float,
                                     group_size: int = 128, registered: bool = False,
                                     use_1stage: bool = False, emit_bf16: bool = False,
                                     transpose_scale: bool = False) -> Any:
        self.calls.append(("fused_ar_rms_per_group_quant", registered))
        return _quant_outputs(inp, emit_bf16)

    def fused_ar_rms_mxfp4_quant(self, inp: Any, res_inp: Any, *, w: Any, eps: float,
                                 registered: bool = False, use_1stage: bool = False,
                                 emit_bf16: bool = False) -> Any:
        self.calls.append(("fused_ar_rms_mxfp4_quant", registered))
        return _quant_outputs(inp, emit_bf16)

    def fused_qknorm_ar(self, qkv_in: Any, q_w: Any, k_w: Any, eps: float,
                        registered: bool = False) -> Any:
        self.calls.append(("fused_qknorm_ar", registered))
        return _qkv_outputs(qkv_in, q_w, k_w, MARK)

    def fused_qknorm_ar_rope(self, qkv_in: Any, q_w: Any, k_w: Any, cos_sin_cache: Any,
                             position_ids: Any, head_dim: int, rotary_dim: int, eps: float,
                             registered: bool = False) -> Any:
        self.calls.append(("fused_qknorm_ar_rope", registered))
        return _qkv_outputs(qkv_in, q_w, k_w, MARK)

    def _fused_form(self, form: str, input: Any, *args: Any, **kwargs: Any) -> Any:
        """aiter's ``custom_fused_*``: its gate, warm-up zeros, then ``form`` registered during
        stream capture (and unregistered otherwise)."""
        if self.disabled or not self.should_custom_ar(input):
            return None
        if self._warm_up():
            return tuple(input.new_zeros(input.shape)
                         for _ in range(4 if kwargs.get("emit_bf16") else 3))
        return getattr(self, form)(input, *args, registered=self._IS_CAPTURING, **kwargs)

    def custom_fused_ar_rms_quant(self, input: Any, residual_inp: Any, weight: Any, eps: float,
                                  use_1stage: bool, gemma_norm: bool = False,
                                  emit_bf16: bool = False) -> Any:
        return self._fused_form("fused_ar_rms", input, residual_inp, w=weight, eps=eps,
                                use_1stage=use_1stage, post_per_token_quant=True,
                                gemma_norm=gemma_norm, emit_bf16=emit_bf16)

    def custom_fused_ar_rms_mxfp4_quant(self, input: Any, residual_inp: Any, weight: Any,
                                        eps: float, use_1stage: bool = False,
                                        emit_bf16: bool = False) -> Any:
        return self._fused_form("fused_ar_rms_mxfp4_quant", input, residual_inp, w=weight,
                                eps=eps, use_1stage=use_1stage, emit_bf16=emit_bf16)

    def _qknorm_form(self, form: str, qkv_in: Any, q_w: Any, k_w: Any, *args: Any) -> Any:
        """aiter's ``custom_fused_qknorm_ar*``: empty outputs where disabled or in warm-up, else
        ``form`` registered during stream capture (no ``should_custom_ar`` gate)."""
        if self.disabled or self._warm_up():
            return _qkv_outputs(qkv_in, q_w, k_w, None)
        return getattr(self, form)(qkv_in, q_w, k_w, *args, registered=self._IS_CAPTURING)

    def custom_fused_qknorm_ar(self, qkv_in: Any, q_w: Any, k_w: Any, eps: float) -> Any:
        return self._qknorm_form("fused_qknorm_ar", qkv_in, q_w, k_w, eps)

    def custom_fused_qknorm_ar_rope(self, qkv_in: Any, q_w: Any, k_w: Any, cos_sin_cache: Any,
                                    position_ids: Any, head_dim: int, rotary_dim: int,
                                    eps: float) -> Any:
        return self._qknorm_form("fused_qknorm_ar_rope", qkv_in, q_w, k_w, cos_sin_cache,
                                 position_ids, head_dim, rotary_dim, eps)
