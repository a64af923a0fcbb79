"""The textbook sequential pass, for graphs that leave TensorFlow.

The one-pass engine (`tfp_maf.sampling.sequential_pass`) picks its loop body per step with
``tf.switch_case``, which neither tf2onnx nor LiteRT's converter takes. A graph meant for
them (`keras_models.portable`) is traced within `full_passes`: the autoregressive
bijectors' forward direction then runs the MADE D times in a ``tf.while_loop``, which
both converters take (ONNX ``Loop``, LiteRT ``WHILE``). The values are the same; the
cost is D passes instead of about one.
"""

from __future__ import annotations

import contextlib
import contextvars

__all__ = ["full_passes", "full_passes_active"]

_ACTIVE = contextvars.ContextVar("tfp_maf_full_passes", default=False)


@contextlib.contextmanager
def full_passes():
    """Within it (while a function is traced, or eagerly), the masked autoregressive
    bijectors' forward direction runs D full passes of the MADE.

    Example:

    >>> import numpy as np
    >>> from tfp_maf import MADENetwork, MaskedAutoregressive
    >>> made = MADENetwork(3, hidden_units=[8], output_kernel_initializer="glorot_uniform", seed=0)
    >>> maf = MaskedAutoregressive(made)
    >>> u = np.random.RandomState(0).standard_normal((4, 3)).astype(np.float32)
    >>> with full_passes():
    ...     x = maf.forward(u)
    >>> bool(np.allclose(x, maf.forward(u), atol=1e-5))
    True
    """
    token = _ACTIVE.set(True)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def full_passes_active() -> bool:
    """Whether the caller is within `full_passes`."""
    return _ACTIVE.get()
