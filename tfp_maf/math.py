"""Small numerical helpers shared by the bijectors."""

from __future__ import annotations

import tensorflow as tf

from tfp_maf.trace_options import trace_options, traced_with

__all__ = ["broadcast_batch", "rows_aligned", "rows_are_aligned", "soft_bound"]


def soft_bound(a: tf.Tensor, bound: float | None) -> tf.Tensor:
    """Identity on ``[-bound/2, bound/2]``, then a tanh ramp saturating at ``+-bound``.

        knee = bound / 2
        f(a) = a                                              if |a| <= knee
        f(a) = sign(a) * (knee + knee * tanh((|a| - knee) / knee))   otherwise

    ``f`` is continuous with a continuous derivative (1 at the knee), so inside
    the knee a model is exactly the paper's; outside, ``exp(f(a))`` cannot
    overflow. ``bound=None`` returns ``a`` unchanged.

    Example:

    >>> import numpy as np
    >>> np.round(soft_bound(np.array([1.0, 4.0, 100.0]), 8.0).numpy(), 3)
    array([1., 4., 8.])
    """
    if bound is None:
        return a
    a = tf.convert_to_tensor(a)
    knee = tf.cast(bound / 2.0, a.dtype)
    magnitude = tf.abs(a)
    ramp = tf.sign(a) * (knee + knee * tf.tanh((magnitude - knee) / knee))
    return tf.where(magnitude <= knee, a, ramp)


def broadcast_batch(a: tf.Tensor, b: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """``a`` ``batch_a + [m]`` and ``b`` ``batch_b + [k]``, both broadcast to their
    common batch: ``batch + [m]`` and ``batch + [k]``.

    By adding zeros, not with ``tf.broadcast_dynamic_shape``: the converters to ONNX and
    LiteRT take the broadcasting of an addition, and no converter takes TensorFlow's
    ``BroadcastArgs`` op (tf2onnx writes an invalid graph). The two additions cost a
    pass over each input.

    Example:

    >>> a, b = broadcast_batch(tf.ones([4, 3]), tf.zeros([1, 2]))
    >>> a.shape, b.shape
    (TensorShape([4, 3]), TensorShape([4, 2]))
    """
    return a + tf.zeros_like(b[..., :1]), b + tf.zeros_like(a[..., :1])


def rows_aligned():
    """Inside it, a conditional network takes ``x`` and the side information ``y`` it is
    given to have one batch shape already, and leaves out its own `broadcast_batch`.

    For a caller that broadcasts them once for a whole flow (a `keras_models` model's
    ``log_prob``): each MADE and coupling network of the flow would otherwise broadcast
    them again, and a train step would trace the two additions and the gradients of
    their broadcasting (about 50 ops a MADE, a tenth of a conditional MAF (5)'s step).
    Unaligned inputs inside it are an error of the caller's.

    Example:

    >>> import numpy as np
    >>> from tfp_maf.layers import MADENetwork
    >>> made = MADENetwork(2, hidden_units=[8], conditional_dims=3, seed=0)
    >>> x, y = broadcast_batch(tf.zeros([4, 2]), tf.ones([1, 3]))
    >>> with rows_aligned():
    ...     shift, log_scale = made(x, conditional_input=y)
    >>> shift.shape
    TensorShape([4, 2])
    """
    return traced_with(rows_aligned=True)  # `tfp_maf.trace_options` says why it is a context


def rows_are_aligned() -> bool:
    """Whether the caller promised aligned ``x`` and ``y`` (inside `rows_aligned`)."""
    return trace_options().rows_aligned
