"""ExpGammaBatchNorm: the batch normalization of the paper's appendix B."""

from __future__ import annotations

import tensorflow as tf

from tfp_maf._platform.graph_memory import custom_gradients_free
from tfp_maf.bijectors.fused import FusedBijector

__all__ = ["ExpGammaBatchNorm", "batch_moments"]


def batch_moments(x: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Mean and (biased) variance of ``x`` over every axis but the last.

    Inside a `tf.distribute` replica context with several replicas they are the
    moments of the *global* batch, so a model trained on N replicas normalizes
    exactly as on one device with the same global batch:

        n = sum_r n_r,   m = sum_r sum_i x_ri / n,   v = sum_r sum_i (x_ri - m)^2 / n

    (two all-reduces: centring on the global mean keeps the variance as
    accurate as the single-device one). Gradients flow through the all-reduces.

    Args:
      x: a tensor (or array) of shape ``batch + [D]``, at least one axis.

    Returns:
      ``(mean, variance)``, each of shape ``[D]`` and the dtype of ``x``; the
      variance divides by the number of rows (``ddof=0``), as batch norm does.

    Example:

    >>> import numpy as np
    >>> mean, variance = batch_moments(np.array([[1., 2.], [3., 6.]]))
    >>> mean.numpy().tolist(), variance.numpy().tolist()
    ([2.0, 4.0], [1.0, 4.0])
    """
    return _counted_moments(x)[1:]


def _one_replica() -> bool:
    """Whether the batch is all on this device (no replicas to reduce over)."""
    context = tf.distribute.get_replica_context()
    return context is None or context.num_replicas_in_sync == 1


def _counted_moments(x):
    """``(rows, mean, variance)`` of `batch_moments`, ``rows`` the global batch's size
    (in the dtype of ``x``)."""
    flat = tf.reshape(x, [-1, tf.shape(x)[-1]])
    rows = tf.cast(tf.shape(flat)[0], flat.dtype)
    if _one_replica():
        return (rows, *tf.nn.moments(flat, axes=[0]))
    context = tf.distribute.get_replica_context()
    total = tf.distribute.ReduceOp.SUM
    rows = context.all_reduce(total, rows)
    mean = context.all_reduce(total, tf.reduce_sum(flat, axis=0)) / rows
    variance = context.all_reduce(total, tf.reduce_sum(tf.square(flat - mean), axis=0)) / rows
    return rows, mean, variance


def _normalized_by_batch(x, beta, gamma, epsilon):
    """The batch norm's inverse by the rows' own moments, with its gradient written out.

    For ``x`` of shape ``[N, D]`` (one device's whole batch):

        m = mean_i x_i,   v = mean_i (x_i - m)^2,   r = 1 / sqrt(v + eps)
        xh = (x - m) r,   u = xh exp(gamma) + beta,   log_det_i = sum_d (gamma_d - log(v_d + eps) / 2)

    and, with ``g = du exp(gamma)`` and ``L = sum_i dlog_det_i`` the upstream gradients,
    (Ioffe and Szegedy's, plus the log-det's through ``v``):

        dbeta  = sum_i du_i
        dgamma = sum_i g_i xh_i + L
        dx     = r (g - mean_i g_i - xh (mean_i g_i xh_i + L / N))

    TF's gradients of the same expressions give these values from about 170 graph ops
    per batch norm, most of them shape bookkeeping for the batch's unknown size; these
    take about 40. A `fit` step's trace, its graph optimisation and every run pay for
    each op: a MAF (5) of D 64 traced 2,288 ops a step with TF's, 1,908 with these, and
    a step ran about 10% shorter (2 cores).

    A `tf.custom_gradient`: traced outside `tfp_maf.tracing.custom_gradients_released`,
    it would leave its graph in TF's registry, so `ExpGammaBatchNorm` takes it only
    where it leaves nothing (`tfp_maf._platform.graph_memory.custom_gradients_free`).

    Returns:
      ``(u, log_det, rows, mean, variance)``: ``u`` ``[N, D]``, ``log_det`` ``[N]``,
      and the batch's size and statistics (no gradient flows from these three).
    """

    @tf.custom_gradient
    def normalize(x, beta, gamma):
        rows = tf.cast(tf.shape(x)[0], x.dtype)
        mean = tf.reduce_mean(x, axis=0)
        centred = x - mean
        variance = tf.reduce_mean(tf.square(centred), axis=0)
        shifted = variance + epsilon
        r = tf.math.rsqrt(shifted)
        scale = tf.exp(gamma)
        xh = centred * r
        u = xh * scale + beta
        log_det = tf.fill(tf.shape(x)[:1], tf.reduce_sum(gamma - 0.5 * tf.math.log(shifted)))

        def grad(du, dlog_det, *unused):  # the statistics' upstream gradients: none flow
            du = tf.zeros_like(u) if du is None else du
            total = 0.0 if dlog_det is None else tf.reduce_sum(dlog_det)
            g = du * scale
            g_xh = tf.reduce_sum(g * xh, axis=0)
            dx = r * (g - tf.reduce_sum(g, axis=0) / rows - xh * ((g_xh + total) / rows))
            return dx, tf.reduce_sum(du, axis=0), g_xh + total

        statistics = [tf.stop_gradient(t) for t in (rows, mean, variance)]
        return (u, log_det, *statistics), grad

    return normalize(x, beta, gamma)


class ExpGammaBatchNorm(FusedBijector):
    """Batch normalization as a bijector, with ``exp(gamma)`` as the scale.

    With ``x`` on the data side and ``u`` on the base side (appendix B of the
    paper):

        forward   x = (u - beta) * exp(-gamma) * sqrt(v + eps) + m
        inverse   u = (x - m) / sqrt(v + eps) * exp(gamma) + beta
        log|det du/dx| = sum_i (gamma_i - 0.5 * log(v_i + eps))

    ``m`` and ``v`` are the mean and variance of ``x``. With the call-time
    keyword ``training=True`` the inverse (the direction `log_prob` uses)
    takes them from the current minibatch, and gradients flow through them.
    Otherwise, and always in the forward direction (sampling, which has no
    minibatch of ``x``), it uses the stored ``mean`` and ``variance``. The
    paper sets those to the statistics of the whole training set before
    validating and testing; `tfp_maf.layers.BatchNormState`
    holds them and sets them explicitly.

    The log-det has the batch shape of the input (it does not depend on the
    example, but a per-example value is what a density needs).

    In training on one device, eagerly or in a trace within
    `tfp_maf.tracing.custom_gradients_released` (a `keras_models` `fit` step), the
    gradient through the minibatch's statistics is written out (Ioffe and Szegedy's
    formulas, about 40 graph ops where TF's own take about 170); elsewhere it is TF's.
    Both give the same values.

    Args:
      beta: shift, shape ``[D]`` (a Tensor, array or variable; read at every
        call, so a variable may train while the bijector lives).
      gamma: log-scale, shape ``[D]``.
      mean: stored mean ``m``, shape ``[D]``.
      variance: stored variance ``v``, shape ``[D]``.
      epsilon: ``eps``; the paper uses ``1e-5``.
      on_batch_moments: None, or ``f(rows, mean, variance)``, called (in the
        graph, when tracing) with each minibatch's size and statistics whenever
        ``training`` normalises by them: how `tfp_maf.layers.BatchNormState`
        keeps the statistics of what it normalised in an epoch. Gradients do not
        flow into it.
      validate_args: TFP's flag.
      name: the bijector's name (unique within a `tfb.Chain`, so that
        ``training`` reaches it: see `tfp_maf.flow_kwargs`).

    Call-time keyword: ``training``, Python `bool` or a boolean tensor (default
    ``None``, the stored statistics).

    The dtype is the first of ``beta``, ``gamma``, ``mean``, ``variance`` that
    has one (float32 for plain Python numbers).

    #### Examples

    With the stored statistics (evaluation), ``u = (x - m) / sqrt(v + eps)``
    when ``beta = gamma = 0``:

    >>> import numpy as np
    >>> from tfp_maf.bijectors import ExpGammaBatchNorm
    >>> bn = ExpGammaBatchNorm(beta=np.zeros(2), gamma=np.zeros(2),
    ...                        mean=np.array([1., 2.]), variance=np.array([4., 9.]))
    >>> np.round(bn.inverse(np.array([[3., 5.]])).numpy(), 3)
    array([[1., 1.]])
    >>> np.round(bn.inverse_log_det_jacobian(np.array([[3., 5.]]), event_ndims=1).numpy(), 3)
    array([-1.792])

    In training, with the minibatch's own statistics, each column comes out
    with mean 0 and variance 1 (up to ``eps``):

    >>> x = np.array([[0., 10.], [2., 30.]])
    >>> np.round(bn.inverse(x, training=True).numpy(), 3)
    array([[-1., -1.],
           [ 1.,  1.]])

    #### References

    [1] Ioffe, Szegedy. Batch Normalization. ICML 2015.
        https://arxiv.org/abs/1502.03167
    [2] Papamakarios, Pavlakou, Murray. Masked Autoregressive Flow for Density
        Estimation. NeurIPS 2017, appendix B. https://arxiv.org/abs/1705.07057
    """

    def __init__(
        self,
        beta,
        gamma,
        mean,
        variance,
        epsilon: float = 1e-5,
        on_batch_moments=None,
        validate_args: bool = False,
        name: str = "exp_gamma_batch_norm",
    ):
        parameters = dict(locals())
        if on_batch_moments is not None and not callable(on_batch_moments):
            raise TypeError(f"{name}: on_batch_moments must be None or callable, got {on_batch_moments!r}.")
        self._on_batch_moments = on_batch_moments
        dtype = _common_dtype(beta, gamma, mean, variance)
        # Keep the references: weights read at call time, so one bijector
        # stays correct while its variables train.
        self._beta, self._gamma = beta, gamma
        self._mean, self._variance = mean, variance
        self._epsilon = float(epsilon)
        super().__init__(
            forward_min_event_ndims=1,
            validate_args=validate_args,
            dtype=dtype,
            parameters=parameters,
            name=name,
        )

    @classmethod
    def _parameter_properties(cls, dtype):
        return {}  # Held as references to layer weights; no batch semantics.

    def _params(self):
        as_tensor = lambda v: tf.convert_to_tensor(v, dtype=self.dtype)  # noqa: E731
        return (
            as_tensor(self._beta),
            as_tensor(self._gamma),
            as_tensor(self._mean),
            as_tensor(self._variance),
        )

    def _statistics(self, x, training):
        _, _, mean, variance = self._params()
        if training is None or training is False:
            return mean, variance
        if training is True:
            return self._batch_moments(x)
        # A boolean tensor (a Keras learning-phase placeholder, say).
        return tf.cond(tf.convert_to_tensor(training), lambda: self._batch_moments(x), lambda: (mean, variance))

    def _batch_moments(self, x):
        rows, mean, variance = _counted_moments(x)
        if self._on_batch_moments is not None:
            self._on_batch_moments(*(tf.stop_gradient(v) for v in (rows, mean, variance)))
        return mean, variance

    def _log_scale(self, gamma, variance, x):
        per_dim = gamma - 0.5 * tf.math.log(variance + self._epsilon)
        return tf.zeros_like(x) + per_dim

    def _inverse_and_log_det(self, x, training=None):
        beta, gamma, _, _ = self._params()
        if training is True and x.shape.rank == 2 and _one_replica() and custom_gradients_free():
            u, log_det, *statistics = _normalized_by_batch(x, beta, gamma, self._epsilon)
            if self._on_batch_moments is not None:
                self._on_batch_moments(*statistics)
            return u, log_det
        mean, variance = self._statistics(x, training)
        u = (x - mean) * tf.math.rsqrt(variance + self._epsilon) * tf.exp(gamma) + beta
        return u, tf.reduce_sum(self._log_scale(gamma, variance, x), axis=-1)

    def _forward_and_log_det(self, u, training=None):
        del training  # Sampling has no minibatch of x: always the stored statistics.
        beta, gamma, mean, variance = self._params()
        x = (u - beta) * tf.exp(-gamma) * tf.sqrt(variance + self._epsilon) + mean
        return x, -tf.reduce_sum(self._log_scale(gamma, variance, u), axis=-1)


def _common_dtype(*values) -> tf.DType:
    for v in values:
        dtype = getattr(v, "dtype", None)
        if dtype is not None:
            return tf.as_dtype(dtype)
    return tf.float32
