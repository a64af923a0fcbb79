"""AffineCoupling: the general-purpose Real NVP coupling layer of the paper."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import tensorflow as tf

from tfp_maf import _checks
from tfp_maf._platform.layer_tracking import LayerVariables
from tfp_maf.arguments import check_bound, check_int
from tfp_maf.bijectors.fused import FusedBijector, dtype_of
from tfp_maf.math import rows_are_aligned, soft_bound

__all__ = ["AffineCoupling", "coupling_partition"]

PARITIES = ("even", "odd")


def coupling_partition(event_size: int, parity: str) -> tuple[np.ndarray, np.ndarray]:
    """Indices ``(copied, transformed)`` of a coupling layer (0-based parity).

    ``parity="even"`` copies ``x[0], x[2], ...`` and transforms
    ``x[1], x[3], ...``; ``"odd"`` is the other way round. Stacked layers
    alternate, as in the paper.

    Args:
      event_size: ``D``, the number of variables, at least 2.
      parity: ``"even"`` or ``"odd"``: which positions are copied.

    Returns:
      ``(copied, transformed)``: two sorted int arrays that partition
      ``range(event_size)``; ``copied`` has ``ceil(D / 2)`` entries for
      ``"even"``, ``floor(D / 2)`` for ``"odd"``.

    Raises:
      ValueError: if ``parity`` is neither ``"even"`` nor ``"odd"``, or
        ``event_size < 2``.

    Example:

    >>> copied, transformed = coupling_partition(5, "even")
    >>> copied.tolist(), transformed.tolist()
    ([0, 2, 4], [1, 3])
    >>> [a.tolist() for a in coupling_partition(5, "odd")]
    [[1, 3], [0, 2, 4]]
    """
    if parity not in PARITIES:
        raise ValueError(f"parity must be one of {PARITIES}, got {parity!r}.")
    if event_size < 2:
        raise ValueError(f"a coupling layer needs at least 2 variables, got {event_size}.")
    idx = np.arange(event_size)
    copied = idx[idx % 2 == (0 if parity == "even" else 1)]
    transformed = idx[idx % 2 == (1 if parity == "even" else 0)]
    return copied, transformed


class AffineCoupling(LayerVariables, FusedBijector):
    """Real NVP coupling: copy half the variables, scale and shift the rest.

    With ``c`` the copied and ``t`` the transformed indices (see
    `coupling_partition`):

        forward   x_c = u_c,   x_t = u_t * exp(alpha(u_c, y)) + mu(u_c, y)
        inverse   u_c = x_c,   u_t = (x_t - mu(x_c, y)) * exp(-alpha(x_c, y))
        log|det dx/du| = sum alpha

    Both directions cost one pass of the networks. In the paper ``alpha`` is
    a feedforward network with tanh hidden units and ``mu`` one with relu
    hidden units, both with linear outputs
    (`tfp_maf.layers.CouplingNetworks`).

    Args:
      shift_and_log_scale_fn: ``fn(x_copied, conditional_input=None) ->
        (shift, log_scale)``, each of shape ``batch + [len(transformed)]``:
        a `tfp_maf.layers.CouplingNetworks` or any callable. Its
        ``conditional_dims`` attribute, if any, says the bijector is
        conditional.
      event_size: ``D``, at least 2.
      parity: ``"even"`` or ``"odd"``, which half is copied
        (`coupling_partition`).
      validate_args: TFP's flag.
      name: the bijector's name (unique within a `tfb.Chain`).
      log_scale_bound: ``None`` (the paper) or ``B``: see
        `tfp_maf.bijectors.MaskedAutoregressive`.

    Call-time keyword: ``conditional_input``, the side information ``y`` (a
    tensor, a NumPy array or a list).

    The networks' weights are the bijector's: ``trainable_variables`` of the
    bijector, and of a `tfb.Chain` or `tfd.TransformedDistribution` holding it,
    lists them (see `tfp_maf._platform.layer_tracking`).

    Raises:
      ValueError: at construction, for a bad ``parity`` or ``event_size < 2``;
        at call time, if the last axis of the input is not ``event_size``.

    #### Examples

    With ``D = 3`` and even parity, ``x[0]`` and ``x[2]`` are copied and ``x[1]``
    is transformed:

    >>> import numpy as np
    >>> from tfp_maf.layers import CouplingNetworks
    >>> from tfp_maf.bijectors import AffineCoupling
    >>> nets = CouplingNetworks(num_copied=2, num_transformed=1, hidden_units=[8])
    >>> b = AffineCoupling(nets, event_size=3, parity="even")
    >>> b.forward(np.ones((1, 3), np.float32)).shape
    TensorShape([1, 3])
    >>> x = np.array([[1., 2., 3.]], np.float32)
    >>> _ = nets.scale_net[-1].kernel.assign(np.ones((8, 1)))  # a non-zero log-scale
    >>> bool(np.all(b.inverse(x).numpy()[:, [0, 2]] == x[:, [0, 2]]))  # copied as they are
    True
    >>> b.forward_log_det_jacobian(x, event_ndims=1).shape
    TensorShape([1])

    #### References

    [1] Dinh, Sohl-Dickstein, Bengio. Density estimation using Real NVP.
        ICLR 2017. https://arxiv.org/abs/1605.08803
    [2] Papamakarios, Pavlakou, Murray. Masked Autoregressive Flow for Density
        Estimation. NeurIPS 2017. https://arxiv.org/abs/1705.07057
    """

    def __init__(
        self,
        shift_and_log_scale_fn: Callable,
        event_size: int,
        parity: str = "even",
        validate_args: bool = False,
        name: str = "affine_coupling",
        log_scale_bound: float | None = None,
    ):
        parameters = dict(locals())
        self._fn = shift_and_log_scale_fn
        self._track_layers(shift_and_log_scale_fn)
        self._log_scale_bound = check_bound(log_scale_bound, "log_scale_bound")
        self._event_size = check_int(event_size, "event_size")
        self._parity = parity
        self._copied, self._transformed = coupling_partition(self._event_size, parity)
        self._merge = np.argsort(np.concatenate([self._copied, self._transformed]))
        self._conditional_dims = getattr(shift_and_log_scale_fn, "conditional_dims", None)
        super().__init__(
            forward_min_event_ndims=1,
            validate_args=validate_args,
            dtype=dtype_of(shift_and_log_scale_fn),
            parameters=parameters,
            name=name,
        )

    @classmethod
    def _parameter_properties(cls, dtype):
        return {}

    @property
    def conditional_dims(self) -> int | None:
        """Width ``K`` of the side information ``y`` (the networks'), or None."""
        return self._conditional_dims

    @property
    def parity(self) -> str:
        """``"even"`` or ``"odd"``: which half is copied (`coupling_partition`)."""
        return self._parity

    def _couple(self, z, conditional_input, sign):
        _checks.check_event_size(z, self._event_size, self.name)
        conditional_input = _checks.as_conditional_input(conditional_input, self.dtype)
        z_c = tf.gather(z, self._copied, axis=-1)
        z_t = tf.gather(z, self._transformed, axis=-1)
        if conditional_input is None:
            shift, log_scale = self._fn(z_c)
        else:
            shift, log_scale = self._fn(z_c, conditional_input=conditional_input)
        self._retrack_layers()
        log_scale = soft_bound(log_scale, self._log_scale_bound)
        if conditional_input is not None and not rows_are_aligned():
            # Broadcast the copied half against the conditional input's batch.
            z_c = z_c + tf.zeros_like(shift[..., :1])
        if sign > 0:
            out_t = z_t * tf.exp(log_scale) + shift
        else:
            out_t = (z_t - shift) / tf.exp(log_scale)  # not * exp(-alpha): a slow fused kernel on CPU
        out = tf.gather(tf.concat([z_c, out_t], axis=-1), self._merge, axis=-1)
        return out, sign * tf.reduce_sum(log_scale, axis=-1)

    def _forward_and_log_det(self, u, conditional_input=None):
        return self._couple(u, conditional_input, +1)

    def _inverse_and_log_det(self, x, conditional_input=None):
        return self._couple(x, conditional_input, -1)
