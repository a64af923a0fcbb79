"""Small numerical helpers shared by the bijectors."""

from __future__ import annotations

import tensorflow as tf

__all__ = ["broadcast_batch", "soft_bound"]


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
