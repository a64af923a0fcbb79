"""Standardize: the fixed affine map between a table's units and standardised ones."""

from __future__ import annotations

import tensorflow as tf

from tfp_maf.bijectors.exp_gamma_batch_norm import _common_dtype
from tfp_maf.bijectors.fused import FusedBijector

__all__ = ["Standardize"]


class Standardize(FusedBijector):
    """``x = loc + scale * u`` per column, with fixed (not trained) ``loc`` and ``scale``.

    The data side of a flow that learns on standardised columns and speaks the
    user's units: the inverse ``u = (x - loc) / scale`` puts each column at mean 0 and
    standard deviation 1 (``loc``, ``scale`` the training data's), and

        log p(x) = log p_flow(u) - sum_i log scale_i

    so densities, samples and exports are in ``x``'s units, exactly. sbi, pzflow and
    BayesFlow standardise so; `tfp_maf.layers.Standardization` holds the statistics.

    Args:
      loc: ``[D]``, what each column's value 0 of ``u`` is in ``x``'s units.
      scale: ``[D]``, positive: one unit of ``u`` in ``x``'s units.
      validate_args: TFP's flag (unused: the statistics are checked where they are set).
      name: the bijector's name, unique within a `tfb.Chain`.

    Example:

    >>> import numpy as np
    >>> b = Standardize(np.array([100., -3.]), np.array([10., 0.5]))
    >>> u, log_det = b.inverse_and_log_det(np.array([[110., -2.]]))
    >>> u.numpy().tolist(), np.round(log_det.numpy(), 4).tolist()
    ([[1.0, 2.0]], [-1.6094])
    >>> b.forward(u).numpy().tolist()
    [[110.0, -2.0]]
    """

    def __init__(self, loc, scale, validate_args: bool = False, name: str = "standardize"):
        parameters = dict(locals())
        dtype = _common_dtype(loc, scale)
        # References, read at each call: the bijector of a layer sees its statistics when set.
        self._loc, self._scale = loc, scale
        super().__init__(forward_min_event_ndims=1, is_constant_jacobian=True, validate_args=validate_args,
                         dtype=dtype, parameters=parameters, name=name)

    @classmethod
    def _parameter_properties(cls, dtype):
        return {}  # held as references to layer weights; no batch semantics

    def _params(self):
        return tf.convert_to_tensor(self._loc, self.dtype), tf.convert_to_tensor(self._scale, self.dtype)

    def _log_det(self, scale, values):
        # One log-det per row: the Jacobian is the same everywhere.
        return tf.broadcast_to(tf.reduce_sum(tf.math.log(scale)), tf.shape(values)[:-1])

    def _forward_and_log_det(self, u, **kwargs):
        loc, scale = self._params()
        return loc + scale * u, self._log_det(scale, u)

    def _inverse_and_log_det(self, x, **kwargs):
        loc, scale = self._params()
        return (x - loc) / scale, -self._log_det(scale, x)
