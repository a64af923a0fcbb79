"""LogTails: the identity near the data, a logarithm of the distance far from it."""

from __future__ import annotations

import tensorflow as tf

from tfp_maf.arguments import check_bound
from tfp_maf.bijectors.fused import FusedBijector

__all__ = ["LogTails"]


class LogTails(FusedBijector):
    """Each column the identity on ``[-T, T]``, logarithmic beyond (data side ``x``, noise side ``u``):

        u = x                                  if |x| <= T
        u = sign(x) * (T + log(1 + |x| - T))   otherwise
        log|du/dx| = -sum over the columns beyond T of log(1 + |x| - T)

    continuous with its first derivative (1 at ``+-T``). On the data side of a flow,
    a row ``d`` units beyond ``T`` reaches the networks at ``T + log(1 + d)``: a row
    at 1e8 standard deviations arrives at ``T + 18.4``, where a flow trained on data
    within ``+-T`` still computes finite values, and its density falls with ``d``
    (the log-det alone by ``log(1 + d)``). Without it a ReLU network's log-scale grows
    with the distance, its ``exp`` overflows, and such a row scores ``-inf``. Rows
    within ``+-T`` are untouched: there the flow is exactly the flow without it.

    Args:
      threshold: ``T`` > 0, in the units of ``x``.
      validate_args: TFP's flag (unused: nothing here has a domain to check).
      name: the bijector's name, unique within a `tfb.Chain`.

    Example:

    >>> import numpy as np
    >>> b = LogTails(2.0)
    >>> u, log_det = b.inverse_and_log_det(np.array([[1.0, 2.0 + np.expm1(3.0)]]))
    >>> np.round(u.numpy(), 4).tolist(), np.round(log_det.numpy(), 4).tolist()
    ([[1.0, 5.0]], [-3.0])
    >>> np.round(b.forward(u).numpy(), 4).tolist()
    [[1.0, 21.0855]]
    """

    def __init__(self, threshold: float, validate_args: bool = False, name: str = "log_tails"):
        parameters = dict(locals())
        self._threshold = check_bound(threshold, "threshold", optional=False)
        super().__init__(forward_min_event_ndims=1, validate_args=validate_args, parameters=parameters,
                         name=name)

    @classmethod
    def _parameter_properties(cls, dtype):
        return {}

    @property
    def threshold(self) -> float:
        return self._threshold

    def _inverse_and_log_det(self, x, **kwargs):
        T = tf.cast(self._threshold, x.dtype)
        beyond = tf.maximum(tf.abs(x) - T, 0.0)  # 0 within the threshold: log(1 + 0) = 0 there
        # log(1 + d), not log1p: ONNX has no Log1p (nor Expm1), and d is 0 or past the knee.
        excess = tf.math.log(1.0 + beyond)
        u = tf.where(beyond > 0, tf.sign(x) * (T + excess), x)
        return u, -tf.reduce_sum(excess, axis=-1)

    def _forward_and_log_det(self, u, **kwargs):
        T = tf.cast(self._threshold, u.dtype)
        excess = tf.maximum(tf.abs(u) - T, 0.0)
        x = tf.where(excess > 0, tf.sign(u) * (T + (tf.exp(excess) - 1.0)), u)
        return x, tf.reduce_sum(excess, axis=-1)  # log(1 + |x| - T) = |u| - T
