"""MaskedAutoregressive: one MADE with Gaussian conditionals as a bijector."""

from __future__ import annotations

import functools
from collections.abc import Callable

import tensorflow as tf

from tfp_maf import _checks
from tfp_maf._tracking import LayerVariables
from tfp_maf.bijectors._fused import FusedBijector, dtype_of
from tfp_maf.math import soft_bound

__all__ = ["MaskedAutoregressive"]


def _affine_step(params, t, u_rows, log_scale_bound):
    """One step of sampling: x = u exp(alpha) + mu for the variable of degree t + 1."""
    log_scale = soft_bound(params[1], log_scale_bound)
    return u_rows[t] * tf.exp(log_scale) + params[0], log_scale


class MaskedAutoregressive(LayerVariables, FusedBijector):
    """The autoregressive layer of MAF: a MADE with Gaussian conditionals.

    Forward (noise ``u`` -> data ``x``), with ``mu, alpha`` the MADE outputs:

        x_i = u_i * exp(alpha_i) + mu_i,   mu_i, alpha_i = f_i(x_<i, y)

    Inverse (data -> noise) and its log-det come from ONE network pass:

        u_i = (x_i - mu_i) * exp(-alpha_i),   log|det du/dx| = -sum_i alpha_i

    so `tfd.TransformedDistribution.log_prob` evaluates each MADE once (the
    log-det is stored with TFP's bijector cache by the inverse; see
    `tfp_maf.bijectors._cache`). The forward direction is exact and sequential:

        x = 0
        repeat D times:  mu, alpha = made(x, y);  x = u * exp(alpha) + mu

    After pass ``k`` the first ``k`` variables of the order are exact, so ``D``
    passes give the exact ``x``; the last pass also gives ``log|det dx/du| =
    sum_i alpha_i`` at no extra cost.

    Args:
      made: a `tfp_maf.layers.MADENetwork` with the Gaussian head, or any callable
        ``made(x, conditional_input=None) -> (shift, log_scale)`` that is
        autoregressive in ``x``.
      validate_args: Python `bool`, TFP's flag; enables runtime shape checks.
      name: the bijector's name. Give every conditional bijector in a
        `tfb.Chain` a unique name: TFP routes keyword arguments by name (see
        `tfp_maf.flow_kwargs`).
      log_scale_bound: ``None`` (the paper: ``alpha`` unbounded) or ``B``:
        ``alpha`` passes through `tfp_maf.math.soft_bound`, exactly the
        identity for ``|alpha| <= B / 2`` and never beyond ``+-B``, so
        ``exp(+-alpha)`` stays finite on wild inputs.

    Call-time keyword: ``conditional_input``, the side information ``y`` of
    shape ``batch + [K]`` (broadcast against the batch of ``x``): a tensor, a
    NumPy array or a list.

    The MADE's weights are the bijector's: ``trainable_variables`` of the
    bijector, and of a `tfb.Chain` or `tfd.TransformedDistribution` holding it,
    lists them (see `tfp_maf._tracking`).

    Raises:
      ValueError: at construction, if ``made`` has the mixture head
        (``num_components`` set: use `tfp_maf.MADEMoG`); at call time, if the
        last axis of ``x`` is not ``made.event_size``, or ``conditional_input``
        is missing, unexpected or of the wrong width for ``made``.

    #### Examples

    A one-layer MAF (a MADE with Gaussian conditionals) over two variables:

    >>> import numpy as np, tensorflow_probability as tfp
    >>> from tfp_maf.layers import MADENetwork
    >>> from tfp_maf.bijectors import MaskedAutoregressive
    >>> flow = tfp.distributions.TransformedDistribution(
    ...     tfp.distributions.MultivariateNormalDiag(loc=np.zeros(2, np.float32)),
    ...     MaskedAutoregressive(MADENetwork(2, hidden_units=[8], seed=0)))
    >>> flow.log_prob(np.zeros((4, 2), np.float32)).shape
    TensorShape([4])
    >>> flow.sample(3, seed=1).shape
    TensorShape([3, 2])
    >>> len(flow.trainable_variables)  # the MADE's two kernels and two biases
    4

    Conditional on ``y`` of width 3, passed by the bijector's name:

    >>> made = MADENetwork(2, hidden_units=[8], conditional_dims=3, seed=0)
    >>> maf = MaskedAutoregressive(made, name="maf_0")
    >>> y = np.eye(3, dtype=np.float32)[[0, 1, 2, 0]]
    >>> maf.inverse(np.zeros((4, 2), np.float32), conditional_input=y).shape
    TensorShape([4, 2])

    #### References

    [1] Germain, Gregor, Murray, Larochelle. MADE: Masked Autoencoder for
        Distribution Estimation. ICML 2015. https://arxiv.org/abs/1502.03509
    [2] Papamakarios, Pavlakou, Murray. Masked Autoregressive Flow for Density
        Estimation. NeurIPS 2017. https://arxiv.org/abs/1705.07057
    """

    def __init__(
        self,
        made: Callable,
        validate_args: bool = False,
        name: str = "masked_autoregressive",
        log_scale_bound: float | None = None,
    ):
        parameters = dict(locals())
        num_components = getattr(made, "num_components", None)
        if num_components is not None:
            raise ValueError(
                "MaskedAutoregressive needs a MADE with the Gaussian head "
                f"(num_components=None); got num_components={num_components}. "
                "Use tfp_maf.distributions.MADEMoG for mixture conditionals."
            )
        self._made = made
        self._track_layers(made)
        self._log_scale_bound = log_scale_bound
        self._event_size = getattr(made, "event_size", None)
        self._conditional_dims = getattr(made, "conditional_dims", None)
        super().__init__(
            forward_min_event_ndims=1,
            validate_args=validate_args,
            dtype=dtype_of(made),
            parameters=parameters,
            name=name,
        )

    @classmethod
    def _parameter_properties(cls, dtype):
        return {}  # The parameters live in the network.

    @property
    def made(self) -> Callable:
        """The network that gives ``(shift, log_scale)``, as passed to the constructor."""
        return self._made

    @property
    def conditional_dims(self) -> int | None:
        """Width ``K`` of the side information ``y`` (the MADE's), or None if unconditional."""
        return self._conditional_dims

    def _shift_and_log_scale(self, x, conditional_input):
        if self._event_size is not None:
            _checks.check_event_size(x, self._event_size, self.name)
        if conditional_input is None:
            shift, log_scale = self._made(x)
        else:
            shift, log_scale = self._made(x, conditional_input=conditional_input)
        self._retrack_layers()
        return shift, soft_bound(log_scale, self._log_scale_bound)

    def _inverse_and_log_det(self, x, conditional_input=None):
        conditional_input = _checks.as_conditional_input(conditional_input, self.dtype)
        shift, log_scale = self._shift_and_log_scale(x, conditional_input)
        u = (x - shift) * tf.exp(-log_scale)
        return u, -tf.reduce_sum(log_scale, axis=-1)

    def _forward_and_log_det(self, u, conditional_input=None):
        conditional_input = _checks.as_conditional_input(conditional_input, self.dtype)
        if self._event_size is not None:
            _checks.check_event_size(u, self._event_size, self.name)
        if hasattr(self._made, "sample_sequentially"):  # a tfp_maf MADE
            return self._mask_aware_forward(u, conditional_input)
        return self._plain_forward(u, conditional_input)

    def _mask_aware_forward(self, u, conditional_input):
        """x = f(u) in one MADE pass spread over D steps (see `tfp_maf.sampling`)."""
        emit = functools.partial(_affine_step, log_scale_bound=self._log_scale_bound)
        x, log_scale = self._made.sample_sequentially(
            emit, u, conditional_input, key=("affine", self._log_scale_bound)
        )
        return x, tf.reduce_sum(log_scale, axis=-1)

    def _plain_forward(self, u, conditional_input=None):
        """x = f(u) by D full passes: for any autoregressive callable (and as the oracle)."""
        event_size = self._event_size or u.shape[-1]
        if event_size is None:
            raise ValueError(f"{self.name}: the number of variables must be known statically.")
        if conditional_input is not None:
            # The loop state must have its final shape from the first pass.
            batch = tf.broadcast_dynamic_shape(tf.shape(u)[:-1], tf.shape(conditional_input)[:-1])
            u = tf.broadcast_to(u, tf.concat([batch, [event_size]], 0))

        def body(x, _):
            shift, log_scale = self._shift_and_log_scale(x, conditional_input)
            return u * tf.exp(log_scale) + shift, log_scale

        x, log_scale = tf.while_loop(
            lambda x, _: True,
            body,
            (tf.zeros_like(u), tf.zeros_like(u)),
            maximum_iterations=event_size,
        )
        return x, tf.reduce_sum(log_scale, axis=-1)
