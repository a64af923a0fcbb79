"""What a caller has decided about how the library's layers and bijectors are traced.

Each option changes what a trace holds, never the values it computes, and each is set by
the code that starts the trace for code it does not call directly:

- ``kernels_as_stored``: `tfp_maf.MaskedDense` reads its kernels as stored, without the
  ``kernel * mask`` product that masks their gradients; the caller masks them after the
  tape (`tfp_maf.layers.mask_gradients`), or takes none. Set by `keras_models`' train
  step, its statistics passes and its samplers (`tfp_maf.layers.kernels_as_stored`).
- ``rows_aligned``: a conditional network takes ``x`` and ``y`` to share one batch shape
  and leaves out its own broadcasting; set by a caller that broadcast them once for a whole
  flow (`tfp_maf.math.rows_aligned`).
- ``custom_gradients_released``: the custom gradients registered in the trace are
  unregistered when it ends, so code may take a written-out `tf.custom_gradient`
  (`tfp_maf.tracing.custom_gradients_released`).
- ``full_passes``, ``xla``, ``gradients``: how the autoregressive bijectors sample: the
  textbook loop of D passes for the converters, TensorFlow's executor where XLA is off,
  samples without gradients (`tfp_maf.sampling.full_passes`, ``without_xla``,
  ``without_gradients``).

Why a context and not arguments: the code that reads them is reached through TFP's and
Keras' calls, which pass no arguments of ours (`tfd.TransformedDistribution.sample` calls
each bijector's ``forward``; a bijector calls its network, which may be a user's
callable, and the network its Keras layers), from a trace a caller starts (a train step,
an export's signature, a user's `tf.function` around ``model.sample``). So they are one
frozen `TraceOptions` in one context variable, read while a function is traced (or
eagerly); each setter nests and restores what it found. No setting outlives its block
and none is process-wide: another thread traces with its own.

Example:

>>> from tfp_maf.trace_options import trace_options, traced_with
>>> with traced_with(rows_aligned=True):
...     trace_options().rows_aligned
True
>>> trace_options().rows_aligned
False
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses

__all__ = ["TraceOptions", "trace_options", "traced_with"]


@dataclasses.dataclass(frozen=True)
class TraceOptions:
    """The options in force (the module docstring says what each means); the defaults are
    a plain call's."""

    kernels_as_stored: bool = False
    rows_aligned: bool = False
    custom_gradients_released: bool = False
    full_passes: bool = False
    xla: bool = True
    gradients: bool = True


# A frozen dataclass: immutable, so one default serves every context (ruff cannot tell).
_OPTIONS = contextvars.ContextVar("tfp_maf_trace_options", default=TraceOptions())  # noqa: B039


def trace_options() -> TraceOptions:
    """The `TraceOptions` in force here."""
    return _OPTIONS.get()


@contextlib.contextmanager
def traced_with(**changes):
    """Within it, `trace_options` has ``changes`` (fields of `TraceOptions`) on top of what
    was in force.

    Raises:
      TypeError: for a name that is not a field of `TraceOptions`.
    """
    token = _OPTIONS.set(dataclasses.replace(_OPTIONS.get(), **changes))
    try:
        yield
    finally:
        _OPTIONS.reset(token)
