"""MaskedAutoregressive: one MADE with Gaussian conditionals as a bijector."""

from __future__ import annotations

import functools
from collections.abc import Callable

import tensorflow as tf

from tfp_maf import _checks
from tfp_maf._platform.graph_memory import custom_gradients_free
from tfp_maf.arguments import check_bound
from tfp_maf.bijectors._autoregressive import MaskedTransform
from tfp_maf.math import rows_are_aligned, soft_bound

__all__ = ["MaskedAutoregressive"]


def _affine(u, shift, log_scale):
    """x = u exp(alpha) + mu, and its log-det alpha."""
    return u * tf.exp(log_scale) + shift, log_scale


def _affine_inverse(x, shift, log_scale):
    """u = (x - mu) exp(-alpha) and the log-det -sum_d alpha_d, for ``x``, ``mu`` and
    ``alpha`` of one shape ``[N, D]``, with the gradient written out:

        dx = du exp(-alpha),   dmu = -dx,   dalpha = -du u - dlog_det

    TF's gradients of the same expressions give these values from about 35 graph ops
    per MADE, most of them shape bookkeeping for the batch's unknown size; these take
    about 8, in every trace of a `fit` step. A `tf.custom_gradient` traced outside
    `tfp_maf.tracing.custom_gradients_released` would leave its graph in TF's registry,
    so `MaskedAutoregressive` takes it only where it leaves nothing
    (`tfp_maf._platform.graph_memory.custom_gradients_free`).
    """

    @tf.custom_gradient
    def inverse(x, shift, log_scale):
        # Divided by exp(alpha), not multiplied by exp(-alpha): TF's CPU graph optimiser
        # fuses Neg and Exp into one composed-unary-ops kernel, about 30 times slower
        # than the two at a batch of 100 rows (a tenth of a small MAF's train step).
        scale = tf.exp(log_scale)
        u = (x - shift) / scale

        def grad(du, dlog_det):
            du = tf.zeros_like(u) if du is None else du
            dx = du / scale
            dlog_scale = -(du * u)
            if dlog_det is not None:
                dlog_scale -= dlog_det[:, tf.newaxis]
            return dx, -dx, dlog_scale

        return (u, -tf.reduce_sum(log_scale, axis=-1)), grad

    return inverse(x, shift, log_scale)


def _affine_step(params, t, u_rows, log_scale_bound):
    """One step of sampling: x = u exp(alpha) + mu for the variable of degree t + 1."""
    return _affine(u_rows[t], params[0], soft_bound(params[1], log_scale_bound))


class MaskedAutoregressive(MaskedTransform):
    """The autoregressive layer of MAF: a MADE with Gaussian conditionals.

    Forward (noise ``u`` -> data ``x``), with ``mu, alpha`` the MADE outputs:

        x_i = u_i * exp(alpha_i) + mu_i,   mu_i, alpha_i = f_i(x_<i, y)

    Inverse (data -> noise) and its log-det come from ONE network pass:

        u_i = (x_i - mu_i) * exp(-alpha_i),   log|det du/dx| = -sum_i alpha_i

    so `tfd.TransformedDistribution.log_prob` evaluates each MADE once (the
    log-det is stored with TFP's bijector cache by the inverse; see
    `tfp_maf._platform.bijector_cache`). The forward direction is exact and sequential:

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
    lists them (see `tfp_maf._platform.layer_tracking`).

    Raises:
      ValueError: at construction, if ``made`` has the mixture head
        (``num_components`` set: use `tfp_maf.MADEMoG`) or the open head (``params``
        set: `tfp_maf.MaskedRationalQuadraticSpline` reads it); at call time, if the
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
        if not callable(made):
            raise TypeError(f"MaskedAutoregressive needs a MADE (a callable: x -> shift, log-scale), got {made!r}.")
        num_components = getattr(made, "num_components", None)
        params = getattr(made, "params", None)
        if num_components is not None or params is not None:
            raise ValueError(
                "MaskedAutoregressive needs a MADE with the Gaussian head (num_components=None, "
                f"params=None); got num_components={num_components}, params={params}. Use "
                "tfp_maf.MADEMoG for mixture conditionals, tfp_maf.MaskedRationalQuadraticSpline "
                "for splines."
            )
        self._log_scale_bound = check_bound(log_scale_bound, "log_scale_bound")
        super().__init__(made, validate_args, parameters, name)

    def _head(self, outputs):
        shift, log_scale = outputs
        return shift, soft_bound(log_scale, self._log_scale_bound)

    def _inverse_and_log_det(self, x, conditional_input=None):
        # Where the MADE's outputs have x's rows (no y, or a y its caller aligned with x,
        # `tfp_maf.math.rows_aligned`), and a fit step's trace keeps no custom gradient:
        # the written-out one (`_affine_inverse`). Elsewhere TF's.
        if ((conditional_input is None or rows_are_aligned()) and x.shape.rank == 2
                and custom_gradients_free()):
            conditional_input = _checks.as_conditional_input(conditional_input, self.dtype)
            return _affine_inverse(x, *self._parameters_at(x, conditional_input))
        return super()._inverse_and_log_det(x, conditional_input)

    def _map_inverse(self, x, theta):
        shift, log_scale = theta
        return (x - shift) / tf.exp(log_scale), -log_scale  # not * exp(-alpha): see above

    def _map_forward(self, u, theta):
        return _affine(u, *theta)

    def _sampling_step(self):
        bound = self._log_scale_bound
        return ("affine", bound), functools.partial(_affine_step, log_scale_bound=bound)
