"""MADEMoG: an autoregressive density with mixture-of-Gaussians conditionals."""

from __future__ import annotations

import functools
import math

import tensorflow as tf
import tensorflow_probability as tfp

from tfp_maf import _checks, sampling
from tfp_maf._platform.layer_tracking import LayerVariables
from tfp_maf.arguments import check_bound
from tfp_maf.math import soft_bound

tfd = tfp.distributions

__all__ = ["MADEMoG"]


def _mixture_step(params, t, noise, num_components, log_scale_bound=None):
    """One step of sampling the variable of degree t + 1: pick a component with the
    Gumbel noise, then draw from it. ``params`` [3C, B]: logits, locs, log-scales."""
    normal_rows, gumbel_rows = noise
    C = num_components
    logits, loc, log_scale = params[:C], params[C : 2 * C], soft_bound(params[2 * C :], log_scale_bound)
    pick = tf.one_hot(tf.argmax(tf.transpose(logits) + gumbel_rows[t], axis=-1), C, dtype=params.dtype)
    pick = tf.transpose(pick)
    mean = tf.reduce_sum(pick * loc, axis=0)
    scale = tf.exp(tf.reduce_sum(pick * log_scale, axis=0))
    return mean + scale * normal_rows[t], mean


class MADEMoG(LayerVariables, tfd.Distribution):
    """MADE whose conditionals are each a mixture of ``C`` Gaussians.

        p(x | y) = prod_i sum_c w_ic N(x_i | m_ic, exp(a_ic)^2),
        w_i = softmax(logits_i),  (logits_i, m_i, a_i) = made_i(x_<i, y)

    `log_prob` is one MADE pass. `sample` is exact: ``D`` passes, each one
    redrawing every variable from its conditional with the SAME pre-drawn
    noise (Gumbel noise to pick the component, a standard normal for the
    value), so after pass ``k`` the first ``k`` variables of the order are
    final. As the base of a `tfd.TransformedDistribution` over MAF layers it
    gives MAF MoG. It is not reparameterized (component choice is discrete).

    Args:
      made: a `tfp_maf.layers.MADENetwork` with ``num_components=C``, or any callable
        ``made(x, conditional_input=None) -> (logits, loc, log_scale)``, each
        ``batch + [D, C]``, autoregressive in ``x``. A generic callable also
        needs ``event_size``.
      event_size: ``D``; read from ``made`` when it is a MADE.
      conditional_input: ``y`` bound to the distribution, p(x | y): used by
        every call that passes none (a tensor, a NumPy array or a list).
      log_scale_bound: None (the paper: ``a_ic`` unbounded) or ``B``: bounds every
        component's log-scale softly to ``+-B`` (`tfp_maf.math.soft_bound`), so that
        a row far from the data scores finite.
      validate_args: TFP's flag; enables runtime checks.
      allow_nan_stats: TFP's flag.
      name: the distribution's name.

    Call-time keyword (to `log_prob`, `sample`, ...): ``conditional_input``,
    the side information ``y``; for ``sample(n)`` it has shape ``[K]`` or
    ``[n, K]``. It overrides the one bound at construction.

    The MADE's weights are the distribution's: ``trainable_variables`` lists
    them (see `tfp_maf._platform.layer_tracking`).

    Raises:
      ValueError: at construction, if ``made`` has the Gaussian head
        (``num_components=None``: use `tfp_maf.MaskedAutoregressive`) or
        ``event_size`` is neither given nor an attribute of ``made``; at call
        time, if the last axis of ``x`` is not ``D``, or ``conditional_input``
        is missing, unexpected or of the wrong width for ``made``.

    #### Examples

    >>> import numpy as np
    >>> from tfp_maf.layers import MADENetwork
    >>> from tfp_maf.distributions import MADEMoG
    >>> dist = MADEMoG(MADENetwork(2, hidden_units=[8], num_components=2, seed=0))
    >>> dist.sample(4, seed=1).shape
    TensorShape([4, 2])
    >>> dist.log_prob(np.zeros((4, 2), np.float32)).shape
    TensorShape([4])

    Conditional on ``y`` of width 3: bound at construction, the distribution
    has the batch shape of ``y`` (``sample()`` draws one ``x`` per row); given
    at call time, ``y`` broadcasts against ``x``:

    >>> made = MADENetwork(2, hidden_units=[8], num_components=2, conditional_dims=3, seed=0)
    >>> given_y = MADEMoG(made, conditional_input=np.eye(3, dtype=np.float32))
    >>> given_y.batch_shape, given_y.log_prob(np.zeros((3, 2), np.float32)).shape
    (TensorShape([3]), TensorShape([3]))
    >>> MADEMoG(made).log_prob(np.zeros((3, 2), np.float32),
    ...                        conditional_input=np.eye(3, dtype=np.float32)).shape
    TensorShape([3])

    #### References

    [1] Papamakarios, Pavlakou, Murray. Masked Autoregressive Flow for Density
        Estimation. NeurIPS 2017. https://arxiv.org/abs/1705.07057
    [2] Uria, Murray, Larochelle. RNADE: The real-valued neural autoregressive
        density-estimator. NeurIPS 2013. https://arxiv.org/abs/1306.0186
    """

    def __init__(
        self,
        made,
        event_size: int | None = None,
        conditional_input=None,
        log_scale_bound: float | None = None,
        validate_args: bool = False,
        allow_nan_stats: bool = True,
        name: str = "MADEMoG",
    ):
        parameters = dict(locals())
        self._log_scale_bound = check_bound(log_scale_bound, "log_scale_bound")
        event_size = event_size or getattr(made, "event_size", None)
        if event_size is None:
            raise ValueError("MADEMoG needs event_size when made is not a tfp_maf.MADENetwork.")
        if getattr(made, "num_components", 1) is None:
            raise ValueError(
                "MADEMoG needs a MADE with the mixture head (num_components=C); got the "
                "Gaussian head. Use tfp_maf.bijectors.MaskedAutoregressive for it."
            )
        self._made = made
        self._track_layers(made)
        self._event_size = int(event_size)
        self._conditional_dims = getattr(made, "conditional_dims", None)
        dtype = getattr(made, "compute_dtype", None)
        dtype = tf.float32 if dtype is None else tf.as_dtype(dtype)
        self._conditional_input = _checks.as_conditional_input(conditional_input, dtype)
        super().__init__(
            dtype=dtype,
            reparameterization_type=tfd.NOT_REPARAMETERIZED,
            validate_args=validate_args,
            allow_nan_stats=allow_nan_stats,
            parameters=parameters,
            name=name,
        )

    @classmethod
    def _parameter_properties(cls, dtype, num_classes=None):
        return {}  # The parameters live in the network.

    @property
    def made(self):
        """The network that gives ``(logits, loc, log_scale)``, as passed to the constructor."""
        return self._made

    @property
    def conditional_dims(self) -> int | None:
        """Width ``K`` of the side information ``y`` (the MADE's), or None if unconditional."""
        return self._conditional_dims

    @property
    def conditional_input(self):
        """The ``y`` bound at construction, or None."""
        return self._conditional_input

    def _given(self, conditional_input):
        """The call's ``y`` as a tensor, else the bound one."""
        if conditional_input is None:
            return self._conditional_input
        return _checks.as_conditional_input(conditional_input, self.dtype)

    def _event_shape(self):
        return tf.TensorShape([self._event_size])

    def _event_shape_tensor(self):
        return tf.constant([self._event_size], dtype=tf.int32)

    # Unbound, the batch shape is [] and a call's y broadcasts against x (one row of y
    # per sample). Bound, p(x | y) has y's batch shape, as any TFP distribution has
    # its parameters': sample(n) gives [n, *batch, D].
    def _batch_shape(self):
        if self._conditional_input is None:
            return tf.TensorShape([])
        return self._conditional_input.shape[:-1]

    def _batch_shape_tensor(self):
        if self._conditional_input is None:
            return tf.constant([], dtype=tf.int32)
        return tf.shape(self._conditional_input)[:-1]

    def _params(self, x, conditional_input):
        _checks.check_event_size(x, self._event_size, self.name)
        if conditional_input is None:
            logits, loc, log_scale = self._made(x)
        else:
            logits, loc, log_scale = self._made(x, conditional_input=conditional_input)
        self._retrack_layers()
        return logits, loc, soft_bound(log_scale, self._log_scale_bound)

    def _log_prob(self, x, conditional_input=None):
        conditional_input = self._given(conditional_input)
        logits, loc, log_scale = self._params(x, conditional_input)
        z = (x[..., None] - loc) / tf.exp(log_scale)  # not * exp(-alpha): a slow fused kernel on CPU
        log_normal = -0.5 * tf.square(z) - log_scale - 0.5 * math.log(2.0 * math.pi)
        log_mix = tf.reduce_logsumexp(tf.nn.log_softmax(logits, axis=-1) + log_normal, axis=-1)
        return tf.reduce_sum(log_mix, axis=-1)

    def _sample_n(self, n, seed=None, conditional_input=None):
        D = self._event_size
        C = getattr(self._made, "num_components", None)
        batch = tf.reshape(n, [1])
        if conditional_input is not None:
            conditional_input = self._given(conditional_input)
            batch = tf.broadcast_dynamic_shape(batch, tf.shape(conditional_input)[:-1])
        elif self._conditional_input is not None:
            conditional_input = self._conditional_input
            batch = tf.concat([batch, tf.shape(conditional_input)[:-1]], 0)
        shape = tf.concat([batch, [D]], 0)
        gumbel_seed, normal_seed = tfp.random.split_seed(seed, n=2, salt="MADEMoG")
        normal = tf.random.stateless_normal(shape, seed=normal_seed, dtype=self.dtype)
        if C is None:  # a generic callable: learn C from one pass.
            C = self._params(tf.zeros(shape, self.dtype), conditional_input)[0].shape[-1]
        uniform = tf.random.stateless_uniform(
            tf.concat([shape, [C]], 0),
            seed=gumbel_seed,
            minval=tf.experimental.numpy.finfo(self.dtype.as_numpy_dtype).tiny,
            maxval=1.0,
            dtype=self.dtype,
        )
        gumbel = -tf.math.log(-tf.math.log(uniform))
        # A tfp_maf MADE, unless the graph is for a converter (`tfp_maf.sampling.full_passes`).
        if sampling.can_sample(self._made) and not sampling.full_passes_active():
            return self._mask_aware_sample(shape, gumbel, normal, conditional_input)
        return self._plain_sample(shape, gumbel, normal, conditional_input)

    def sample_from_noise(self, normal, gumbel, conditional_input=None):
        """The sample that given noise makes: what `sample` computes from the noise it draws.

            pick_i = argmax_c(logits_ic + gumbel_ic),  x_i = m_i,pick + exp(a_i,pick) normal_i

        with the parameters of ``made(x_<i, y)``, variable by variable in the MADE's
        order. Within `tfp_maf.sampling.full_passes` it runs D full passes of the MADE
        (the graph that ONNX and LiteRT converters take), else one pass spread over D
        steps.

        Args:
          normal: ``[n, D]`` standard normal draws.
          gumbel: ``[n, D, C]`` standard Gumbel draws (``-log(-log(u))`` of uniform
            ``u``), one per variable and component.
          conditional_input: ``y`` ``[n, K]`` or ``[1, K]``, else the bound one.

        Returns:
          ``[n, D]`` samples.

        Example:

        >>> import numpy as np
        >>> from tfp_maf import MADENetwork
        >>> made = MADENetwork(2, hidden_units=[8], num_components=3, seed=0)
        >>> rng = np.random.default_rng(0)
        >>> normal = rng.standard_normal((4, 2)).astype(np.float32)
        >>> gumbel = rng.gumbel(size=(4, 2, 3)).astype(np.float32)
        >>> MADEMoG(made).sample_from_noise(normal, gumbel).shape
        TensorShape([4, 2])
        """
        conditional_input = self._given(conditional_input)
        normal = tf.convert_to_tensor(normal, self.dtype)
        gumbel = tf.convert_to_tensor(gumbel, self.dtype)
        if sampling.can_sample(self._made) and not sampling.full_passes_active():
            return self._mask_aware_sample(tf.shape(normal), gumbel, normal, conditional_input)
        return self._plain_sample(tf.shape(normal), gumbel, normal, conditional_input)

    def _plain_sample(self, shape, gumbel, normal, conditional_input):
        """D full passes: for any autoregressive callable (and as the oracle)."""
        C = gumbel.shape[-1]

        def body(x):
            logits, loc, log_scale = self._params(x, conditional_input)
            pick = tf.one_hot(tf.argmax(logits + gumbel, axis=-1), C, dtype=self.dtype)
            mean = tf.reduce_sum(pick * loc, axis=-1)
            scale = tf.exp(tf.reduce_sum(pick * log_scale, axis=-1))
            return (mean + scale * normal,)

        (x,) = tf.while_loop(
            lambda x: True, body, (tf.zeros(shape, self.dtype),), maximum_iterations=self._event_size
        )
        return x

    def _mask_aware_sample(self, shape, gumbel, normal, conditional_input):
        """The same draw as the D-pass loop, in one MADE pass spread over D steps
        (see `tfp_maf.sampling`)."""
        C = self._made.num_components
        # `normal` [*shape, D] and `gumbel` [*shape, D, C] have the full batch shape.
        emit = functools.partial(_mixture_step, num_components=C, log_scale_bound=self._log_scale_bound)
        x, _ = sampling.sample_sequentially(self._made, emit, (normal, gumbel), conditional_input,
                                            key=("mixture", C, self._log_scale_bound))
        return tf.reshape(x, shape)
