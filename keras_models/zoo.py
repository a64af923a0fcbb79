"""The paper's models as Keras 3 models.

| model | paper section | class |
|---|---|---|
| Gaussian (full covariance; class-conditional) | Tables 1, 2 baseline | `Gaussian` |
| MADE, Gaussian conditionals (Germain et al. 2015) | 2.1, 4 | `MADE` |
| MADE MoG, C = 10 | 4 | `MADEMoG` |
| Real NVP (5 / 10) (Dinh et al. 2017) | 3.3, 4 | `RealNVP` |
| MAF (5 / 10) | 3 | `MAF` |
| MAF MoG (5) | 4 | `MAFMoG` |
| NSF (5): autoregressive rational-quadratic splines (Durkan et al. 2019) | beyond the paper | `NSF` |

As in the paper: the first MAF layer uses the data's order and each next one
reverses it; a batch norm follows every autoregressive / coupling layer (so one sits
between every two layers and before the base); L2 penalty 1e-6 on every kernel. The
defaults suit small data.

Each model takes ``D`` first, then exactly the keywords that change it
(`keras_models.density_model.keywords` lists them) and refuses any other with a
TypeError that names it. The keywords several models share mean the same in each:

- ``hidden_units`` (every flow): sizes of the hidden layers of every network; default
  ``(64, 64)``. The paper chose per dataset among 1 or 2 layers of 100 (POWER, GAS), 512
  (HEPMASS, MINIBOONE, BSDS300) or 1024 units (MNIST, CIFAR-10):
  `keras_models.presets.model_kwargs`.
- ``conditional_dims`` (all): ``K_y``, the width of the side information ``y`` (10
  one-hot classes for conditional MNIST and CIFAR-10), or None.
- ``context_network`` (every flow): None, or a Keras layer mapping ``y`` ``[N, K_y]`` to
  an embedding ``[N, E]`` that every layer reads instead of ``y``, trained, saved and
  exported with the model (``docs/conditional.md``).
- ``l2`` (every flow): the L2 penalty on every kernel, ``1e-6`` as in the paper; 0 for
  none. Added to the gradient, not to the reported ``loss``.
- ``seed`` (every flow): seeds the orders, degrees and initial weights (layer ``i`` gets
  ``seed + i``): the same seed gives the same model, in any process.
- ``num_layers`` (MAF, MAF MoG, NSF, Real NVP): ``K``, the flow's layers (5 or 10 in the
  paper).
- ``batch_norm`` (MAF, MAF MoG, NSF): whether a batch norm follows each layer (the
  paper: yes).
- ``log_scale_bound`` (MADE, MAF, MAF MoG, Real NVP): None (the paper) or ``B``: bounds
  every affine log-scale softly to ``+-B`` (`tfp_maf.math.soft_bound`), against overflow
  on wild data.
- ``num_components`` (MADE MoG, MAF MoG): ``C``, the Gaussians of each conditional (10
  in the paper).
- ``activation`` (the MADE options: MADE, MADE MoG, MAF, MAF MoG, NSF): the MADEs'
  hidden activation, ``"relu"`` (the paper's default) or ``"tanh"`` (its choice for
  GAS).
- ``hidden_degrees`` (the MADE options): ``"sequential"`` (the paper) or ``"random"``
  (its CIFAR-10 setting, fewer hidden units than variables).
- ``kernel_blocks``, ``kernel_blocks_device`` (the MADE options): the MADEs' kernel
  storage (`tfp_maf.MADENetwork`): ``"auto"`` stores large kernels in degree blocks on a
  CPU and dense on a GPU, 1 all dense; the same densities. A saved model loads with the
  storage it was saved with; weights files load into any storage, optimizer state
  included.
- ``initialization`` (the MADE options): ``"default"`` or ``"published"`` (the published
  code's; `keras_models.initialization`).
- ``conditional_input_layers`` (the MADE options): which hidden layers ``y`` feeds:
  ``"all_layers"`` (default) or ``"first_layer"`` (the published code's wiring).
- ``scale_parameterization`` (the MADE options but NSF's): the MADEs' scale outputs:
  ``"log_scale"`` (default) or ``"log_precision"`` (the published code's): the same
  densities, the log-scales moving half as far per Adam step.

and Keras' ``name``, ``dtype`` (``"float32"`` or ``"float64"``) and ``trainable``.
The `Gaussian` takes ``conditional_dims`` and Keras' keywords only. Files saved by
earlier releases, whose configs held keys a model did not use, load to the same model.

Every model is a `keras_models.DensityModel`: ``fit`` minimises the mean negative
log-likelihood, ``model(x)`` and ``log_prob(x)`` give log p(x) per row, ``sample(n)``
draws, ``distribution()`` is the TFP distribution, ``save`` / ``export`` write it. Train
them as the paper does with `keras_models.training`, or with plain ``compile`` / ``fit``.

Example:

>>> import numpy as np
>>> from keras_models import zoo
>>> model = zoo.build("maf5", 2, hidden_units=[8])  # the command line's names
>>> type(model).__name__, model.num_layers
('MAF', 5)
>>> len(model.mades), len(model.norms)  # a batch norm after each MADE
(5, 5)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import keras
import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

import tfp_maf
from keras_models import _kernel_layout
from keras_models.density_model import DensityModel, keywords
from keras_models.initialization import made_initializers
from tfp_maf._devices import check_device_kind
from tfp_maf.bijectors._cache import GraphLocalChain
from tfp_maf.layers.made import check_conditional_input_layers, check_scale_parameterization
from tfp_maf.sampling import full_passes_active
from tfp_maf.splines import num_spline_params

tfd = tfp.distributions

__all__ = ["MADE", "MAF", "NSF", "Gaussian", "MADEMoG", "MAFMoG", "RealNVP", "build", "model_keywords"]

L2 = 1e-6


def _regularizer(l2):
    return keras.regularizers.L2(l2) if l2 else None


def _standard_normal(event_size, dtype, y=None):
    """N(0, I) over ``D`` variables, with the batch shape of ``y`` (if given), so that a
    distribution p(x | y) draws one ``x`` per row of ``y``."""
    batch = tf.zeros([0], tf.int32) if y is None else tf.shape(y)[:-1]
    # Independent normals, not `tfd.MultivariateNormalDiag`: the same density and draws,
    # with no TFP bijector inside, whose process-wide cache would keep every trace.
    loc = tf.zeros(tf.concat([batch, [event_size]], 0), dtype=dtype)
    return tfd.Independent(tfd.Normal(loc=loc, scale=tf.ones([], dtype)), reinterpreted_batch_ndims=1)


@keras.saving.register_keras_serializable(package="keras_models")
class Gaussian(DensityModel):
    """Full-covariance Gaussian fitted in closed form (class-conditional with ``conditional_dims``).

    The baseline of the paper's Tables 1 and 2:

        p(x) = N(x | m, S)                     m, S: mean and covariance of the data
        p(x | y) = N(x | m_k, S_k)             k = argmax y, one Gaussian per class

    Call `fit_closed_form(x, y)`: maximum-likelihood mean and covariance
    (one per class for the conditional model, ``y`` one-hot). Nothing is
    trained by gradient descent: `keras_models.training.fit_as_paper` fits it in
    closed form, and a plain ``fit`` changes nothing (the model has no trainable
    weights). Conditional, the distribution is a mixture of the class Gaussians
    with weights ``y``, which a one-hot ``y`` reduces to its class's Gaussian.

    Args:
      event_size: ``D``, the number of variables.
      conditional_dims: ``K``, the number of classes (``y`` one-hot), or None.
      **kwargs: Keras' model arguments (``name``, ``dtype``: ``"float32"`` or
        ``"float64"``).

    Raises:
      ValueError: if ``event_size < 1`` or the dtype policy is neither float32
        nor float64.

    Example:

    >>> import numpy as np
    >>> from keras_models import Gaussian
    >>> x = np.random.default_rng(0).standard_normal((100, 2)).astype(np.float32)
    >>> model = Gaussian(2).fit_closed_form(x)
    >>> bool(np.allclose(model.loc.numpy()[0], x.mean(0), atol=1e-6))
    True
    >>> model.log_prob(x[:3]).shape, model.sample(5, seed=0).shape
    (TensorShape([3]), TensorShape([5, 2]))

    Class-conditional, with one-hot labels:

    >>> y = np.eye(2, dtype=np.float32)[np.arange(100) % 2]
    >>> model = Gaussian(2, conditional_dims=2).fit_closed_form(x, y)
    >>> model.log_prob(x[:3], y[:3]).shape, model.sample(4, y=[1., 0.], seed=0).shape
    (TensorShape([3]), TensorShape([4, 2]))
    """

    def __init__(self, event_size: int, conditional_dims: int | None = None, **kwargs):
        super().__init__(event_size, conditional_dims, **kwargs)
        K = conditional_dims or 1
        D = self.event_size
        self.loc = self.add_weight(name="loc", shape=(K, D), initializer="zeros", trainable=False)
        self.scale_tril = self.add_weight(
            name="scale_tril", shape=(K, D, D),
            initializer=lambda shape, dtype=None: np.broadcast_to(np.eye(D), shape).astype(dtype or "float32"),
            trainable=False,
        )

    def fit_in_closed_form(self, x, y=None) -> bool:
        """`fit_closed_form` with the default jitter; returns True (it did fit).

        The hook `keras_models.training.fit_as_paper` calls before training by
        gradient (`DensityModel.fit_in_closed_form`).

        Args:
          x: the training data ``[N, D]``.
          y: one-hot labels ``[N, K]`` for the conditional model, else None.

        Returns:
          True.
        """
        self.fit_closed_form(x, y)
        return True

    def fit_closed_form(self, x, y=None, jitter: float = 1e-6) -> Gaussian:
        """Sets the maximum-likelihood mean and covariance of ``x`` (per class of ``y``).

        The covariance is the biased one (divided by N), plus ``jitter`` times the
        identity so that its Cholesky factor exists for degenerate data.

        Args:
          x: the training data ``[N, D]`` (array-like; computed in float64).
          y: one-hot labels ``[N, K]`` for the conditional model (the class is the
            argmax of each row), else None.
          jitter: added to the covariance's diagonal.

        Returns:
          The model itself, fitted.

        Raises:
          ValueError: if a class has fewer than 2 examples.
          numpy.linalg.LinAlgError: if a covariance plus ``jitter`` is not
            positive definite.
        """
        x = np.asarray(x, dtype=np.float64)
        if self.conditional_dims is None:
            groups = [x]
        else:
            labels = np.argmax(np.asarray(y), axis=-1)
            groups = [x[labels == k] for k in range(self.conditional_dims)]
            empty = [k for k, g in enumerate(groups) if len(g) < 2]
            if empty:
                raise ValueError(f"{self.name}: classes {empty} have fewer than 2 training examples.")
        locs, trils = [], []
        for g in groups:
            cov = np.cov(g, rowvar=False, bias=True).reshape(self.event_size, self.event_size)
            cov += jitter * np.eye(self.event_size)
            locs.append(g.mean(0))
            trils.append(np.linalg.cholesky(cov))
        self.loc.assign(np.stack(locs))
        self.scale_tril.assign(np.stack(trils))
        return self

    def _log_prob(self, x, y, training):
        if not full_passes_active():
            return super()._log_prob(x, y, training)
        # For ONNX and LiteRT, which take no triangular solve (TFP's route): the same
        # density, with L u = x - m solved by D sweeps of a matrix product.
        L, D = tf.convert_to_tensor(self.scale_tril), self.event_size
        diag = tf.reduce_sum(L * tf.eye(D, dtype=L.dtype), axis=-1)  # [C, D]
        below = tf.transpose(L * (1.0 - tf.eye(D, dtype=L.dtype)), [0, 2, 1])  # L's strict lower part, [C, D, D]
        residual = tf.transpose(x[:, None, :] - self.loc[None], [1, 0, 2])  # [C, n, D]
        u = tf.while_loop(lambda u: True, lambda u: [(residual - tf.matmul(u, below)) / diag[:, None, :]],
                          [tf.zeros_like(residual)], maximum_iterations=D)[0]
        log_p = (-0.5 * tf.reduce_sum(tf.square(u), -1) - tf.reduce_sum(tf.math.log(tf.abs(diag)), -1)[:, None]
                 - 0.5 * D * math.log(2 * math.pi))  # [C, n]
        if y is None:
            return log_p[0]
        return tf.reduce_logsumexp(tf.transpose(log_p) + tf.math.log(y), axis=-1)  # the mixture over classes

    def _from_noise(self, noise, y, gumbel):
        # x = m + L z, per class; a one-hot y picks its class (the weighted sum is exact).
        x = self.loc[None] + tf.tensordot(noise, self.scale_tril, [[1], [2]])  # [n, C, D]
        return x[:, 0] if y is None else tf.reduce_sum(x * y[:, :, None], axis=1)

    def _distribution(self, y, training):
        if self.conditional_dims is None:
            return tfd.MultivariateNormalTriL(loc=self.loc[0], scale_tril=self.scale_tril[0])
        # A mixture over the class Gaussians with weights y: a one-hot y selects its class
        # exactly, and memory stays K x D x D (per-example scale matrices would take
        # N x D x D: 24 GB for the MNIST test set).
        classes = tfd.MultivariateNormalTriL(loc=self.loc, scale_tril=self.scale_tril)
        return tfd.MixtureSameFamily(tfd.Categorical(probs=y), classes)


class _FlowModel(DensityModel):
    """What every flow of the zoo takes: its networks' hidden sizes, ``y``'s width and
    embedding, the L2 penalty and the seed (the module docstring says what each means).

    Subclasses declare the keywords they add in their own constructors: a model takes
    exactly the keywords of its classes' constructors (`keras_models.density_model.keywords`),
    and refuses any other with a TypeError.
    """

    def __init__(
        self,
        event_size: int,
        *,
        hidden_units: Sequence[int] = (64, 64),
        conditional_dims: int | None = None,
        context_network: keras.layers.Layer | None = None,
        l2: float = L2,
        seed: int = 0,
        **kwargs,
    ):
        super().__init__(event_size, conditional_dims, **kwargs)
        self.context_network = context_network
        #: The width of what the flow's networks read: y's, or its embedding's.
        self.context_dims = self._context_dims(context_network)
        self.hidden_units = [int(h) for h in hidden_units]
        self.l2 = float(l2)
        self.seed = int(seed)

    def _context_dims(self, context_network) -> int | None:
        """The embedding's width, from one call of ``context_network`` (which builds it)."""
        if context_network is None:
            return self.conditional_dims
        if not isinstance(context_network, keras.layers.Layer):
            raise ValueError(
                f"context_network must be a Keras layer mapping y to an embedding, got "
                f"{type(context_network).__name__}.")
        if self.conditional_dims is None:
            raise ValueError(f"{self.name} is unconditional (conditional_dims=None): a context_network needs y.")
        out = context_network(keras.ops.zeros((1, self.conditional_dims), context_network.compute_dtype))
        if len(out.shape) != 2 or out.shape[-1] is None:
            raise ValueError(
                f"context_network must map y [N, {self.conditional_dims}] to an embedding [N, E]; it gave "
                f"shape {tuple(out.shape)}.")
        return int(out.shape[-1])

    def context(self, y, training: bool = False):
        """``y`` as the flow's layers read it: its embedding by the context network, for
        any batch shape; ``y`` itself without one (`DensityModel.context`)."""
        if y is None or self.context_network is None:
            return y
        flat = tf.reshape(y, [-1, self.conditional_dims])
        flat = tf.cast(flat, self.context_network.compute_dtype)
        embedding = tf.cast(self.context_network(flat, training=training), self.compute_dtype)
        return tf.reshape(embedding, tf.concat([tf.shape(y)[:-1], [self.context_dims]], 0))

    def _batch_norm(self, i):
        return tfp_maf.BatchNormState(self.event_size, dtype=self.dtype_policy, name=f"batch_norm_{i}")

    def load_weights(self, filepath, skip_mismatch=False, **kwargs):
        with _kernel_layout.matching_weights(filepath, self) as path:
            super().load_weights(path, skip_mismatch=skip_mismatch, **kwargs)

    def _bijectors(self) -> list:
        """The flow's bijectors, data side first (TFP's `Chain` order)."""
        raise NotImplementedError

    def _base(self, y) -> tfd.Distribution:
        return _standard_normal(self.event_size, self.compute_dtype, y)

    def _distribution(self, y, training):
        y = self.context(y, training)
        # A `tfb.Chain` whose cache entries die with the model's traces (`GraphLocalChain`).
        flow = tfd.TransformedDistribution(self._base(y), GraphLocalChain(self._bijectors()))
        return tfp_maf.bind_kwargs(flow, y, training)

    def _from_noise(self, noise, y, gumbel):
        y = self.context(y, False)
        x = self._base_from_noise(noise, y, gumbel)  # the base's draw; the bijectors take it to the data
        for bijector in reversed(self._bijectors()):
            x = bijector.forward(x, **tfp_maf.flow_kwargs(bijector, y, False))
        return x

    def _base_from_noise(self, noise, y, gumbel):
        return noise  # N(0, I)

    def _log_prob(self, x, y, training):
        # The distribution's density, by the bijectors' fused passes summed
        # (`inverse_and_log_det`): TFP's chain and transformed distribution add shape
        # handling and caching around the same passes, a sixth of the ops a training step
        # traces (a MAF (5): 2,486 to 2,066, its first batch 0.2 s sooner on 2 cores).
        y = self.context(y, training)
        u, log_det = x, 0.0
        for bijector in self._bijectors():  # data side first
            u, part = bijector.inverse_and_log_det(u, **tfp_maf.flow_kwargs(bijector, y, training))
            log_det += part
        return self._base(y).log_prob(u) + log_det

    def get_config(self):
        config = super().get_config()
        config.update(
            hidden_units=self.hidden_units, l2=self.l2, seed=self.seed,
            context_network=(None if self.context_network is None
                             else keras.saving.serialize_keras_object(self.context_network)),
        )
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config.get("context_network"), dict):
            config["context_network"] = keras.saving.deserialize_keras_object(config["context_network"])
        return super().from_config(config)


class _MADEFlow(_FlowModel):
    """The MADE options, declared once: every model whose layers are MADEs
    (`tfp_maf.MADENetwork`) takes them, and each MADE it builds gets them.

    ``activation``, ``hidden_degrees``, ``kernel_blocks``, ``kernel_blocks_device``,
    ``initialization``, ``conditional_input_layers``, ``scale_parameterization``: the
    module docstring says what each means.
    """

    def __init__(
        self,
        event_size: int,
        *,
        activation: str = "relu",
        hidden_degrees: str = "sequential",
        kernel_blocks: int | str = "auto",
        kernel_blocks_device: str | None = None,
        initialization: str = "default",
        conditional_input_layers: str = "all_layers",
        scale_parameterization: str = "log_scale",
        **kwargs,
    ):
        made_initializers(initialization)  # refuses an unknown one before anything is built
        super().__init__(event_size, **kwargs)
        self.activation = activation
        self.hidden_degrees = hidden_degrees
        self.kernel_blocks = kernel_blocks
        self.kernel_blocks_device = check_device_kind(kernel_blocks_device)
        self.initialization = initialization
        self.conditional_input_layers = check_conditional_input_layers(conditional_input_layers)
        self.scale_parameterization = check_scale_parameterization(scale_parameterization)

    def _made(self, order, name, num_components=None, seed=0, params=None):
        return tfp_maf.MADENetwork(
            self.event_size, self.hidden_units, num_components=num_components, params=params,
            activation=self.activation, order=order, conditional_dims=self.context_dims,
            hidden_degrees=self.hidden_degrees, seed=seed, kernel_regularizer=_regularizer(self.l2),
            conditional_input_layers=self.conditional_input_layers,
            kernel_blocks=self.kernel_blocks, kernel_blocks_device=self.kernel_blocks_device,
            scale_parameterization=self.scale_parameterization,
            dtype=self.dtype_policy, name=name, **made_initializers(self.initialization, num_components),
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            activation=self.activation, hidden_degrees=self.hidden_degrees,
            kernel_blocks=self.kernel_blocks, kernel_blocks_device=self.kernel_blocks_device,
            initialization=self.initialization, conditional_input_layers=self.conditional_input_layers,
            scale_parameterization=self.scale_parameterization,
        )
        return config


def _orders(num_layers):
    """First layer in the data's order, each next one reversed."""
    return ["left-to-right" if i % 2 == 0 else "right-to-left" for i in range(num_layers)]


class _MADEStack(_MADEFlow):
    """K layers on MADEs, a batch norm after each: the MAF and the spline flow.

    Subclasses give `_layer`, the bijector of layer ``i`` on its MADE.
    """

    def __init__(self, event_size: int, *, num_layers: int = 5, batch_norm: bool = True, **kwargs):
        super().__init__(event_size, **kwargs)
        self.num_layers = int(num_layers)
        self.batch_norm = bool(batch_norm)
        self.mades = [
            self._made(order, f"made_{i}", seed=self.seed + i)
            for i, order in enumerate(_orders(self.num_layers))
        ]
        self.norms = [self._batch_norm(i) for i in range(self.num_layers)] if self.batch_norm else []

    def _layer(self, i, made):
        raise NotImplementedError

    def _bijectors(self):
        out = []
        for i, made in enumerate(self.mades):
            out.append(self._layer(i, made))
            if self.norms:
                out.append(self.norms[i].bijector())
        return out

    def get_config(self):
        config = super().get_config()
        config.update(num_layers=self.num_layers, batch_norm=self.batch_norm)
        return config


@keras.saving.register_keras_serializable(package="keras_models")
class MAF(_MADEStack):
    """MAF (K): K MADE layers, a batch norm after each, standard normal base.

    Masked Autoregressive Flow (section 3 of the paper). From data to noise, each
    layer is a `tfp_maf.MaskedAutoregressive` (one MADE pass) followed by a
    `tfp_maf.ExpGammaBatchNorm`:

        u = x;  for k = 1..K:  u_i = (u_i - mu_i(u_<i)) exp(-alpha_i(u_<i));  u = BN_k(u)
        log p(x) = log N(u | 0, I) + sum of the layers' log-dets

    The first MADE uses the data's order and each next one reverses it. ``log_prob``
    costs K MADE passes; ``sample`` is exact, each layer about one MADE pass
    (`tfp_maf.sampling`). The paper trains MAF (5) and MAF (10) with Adam at
    ``1e-4``, minibatches of 100 and early stopping
    (`keras_models.training.fit_as_paper`).

    Args:
      event_size: ``D``, the number of variables.
      log_scale_bound: None (the paper) or ``B``: bounds every log-scale softly
        to ``+-B`` (`tfp_maf.math.soft_bound`), against overflow on wild data.
      **kwargs: the keywords below, the flows' keywords (``hidden_units``, ``conditional_dims``,
        ``context_network``, ``l2``, ``seed``: MADE ``i`` gets ``seed + i``), the
        MADE options (``activation``, ``hidden_degrees``, ``kernel_blocks``,
        ``kernel_blocks_device``, ``initialization``, ``conditional_input_layers``,
        ``scale_parameterization``), all in the module docstring, and Keras'
        ``name``, ``dtype`` (``"float32"`` or ``"float64"``), ``trainable``.

    Keyword Args:
      num_layers: ``K``, the number of MADE layers (5 or 10 in the paper).
      batch_norm: whether a batch norm follows each MADE (the paper: yes).

    Raises:
      TypeError: for any other keyword.
      ValueError: if ``event_size < 1``, the dtype policy is neither float32 nor
        float64, or a MADE argument is invalid (see `tfp_maf.MADENetwork`).

    Example:

    >>> import keras, numpy as np
    >>> from keras_models import MAF
    >>> x = np.random.default_rng(0).standard_normal((32, 2)).astype(np.float32)
    >>> model = MAF(2, num_layers=2, hidden_units=[8])
    >>> model.compile(optimizer=keras.optimizers.Adam(1e-3))
    >>> history = model.fit(x, batch_size=16, epochs=1, verbose=0)
    >>> len(history.history["loss"])
    1
    >>> log_p = model.log_prob(x[:4])
    >>> log_p.shape, bool(np.all(np.isfinite(log_p)))
    (TensorShape([4]), True)
    >>> model.sample(3, seed=0).shape
    TensorShape([3, 2])

    #### References

    [1] Papamakarios, Pavlakou, Murray. Masked Autoregressive Flow for Density
        Estimation. NeurIPS 2017. https://arxiv.org/abs/1705.07057
    """

    retired_config_keys = ("num_components",)  # saved by 0.3.0 and 0.4.0, unused

    def __init__(self, event_size: int, *, log_scale_bound: float | None = None, **kwargs):
        self.log_scale_bound = log_scale_bound  # read by `_layer`, which __init__ calls
        super().__init__(event_size, **kwargs)

    def _layer(self, i, made):
        return tfp_maf.MaskedAutoregressive(made, name=f"maf_{i}", log_scale_bound=self.log_scale_bound)

    def get_config(self):
        config = super().get_config()
        config.update(log_scale_bound=self.log_scale_bound)
        return config


@keras.saving.register_keras_serializable(package="keras_models")
class MADE(MAF):
    """MADE with Gaussian conditionals: one MADE, no batch norm.

    The paper's MADE (Germain et al. 2015 with Gaussian conditionals, section 2.1):

        p(x) = prod_i N(x_i | mu_i, exp(alpha_i)^2),   mu_i, alpha_i = f_i(x_<i)

    in the data's order, one MADE pass per ``log_prob``. The paper trains it with
    Adam at ``1e-3`` (`keras_models.training.compile_as_paper` with ``"made"``).
    It is a `MAF` of one layer without batch norm: it takes the `MAF`'s keywords but
    ``num_layers`` and ``batch_norm`` (``MAF(D, num_layers=K, batch_norm=False)``
    stacks K MADEs without them).

    Args:
      event_size: ``D``, the number of variables.
      **kwargs: ``log_scale_bound``, the flows' keywords and the MADE options (as
        `MAF`; ``seed`` seeds the random hidden degrees and initial weights), and
        Keras' ``name``, ``dtype``, ``trainable``.

    Raises:
      TypeError: for any other keyword.
      ValueError: as `MAF`.

    Example:

    >>> import keras, numpy as np
    >>> from keras_models import MADE
    >>> x = np.random.default_rng(0).standard_normal((32, 2)).astype(np.float32)
    >>> model = MADE(2, hidden_units=[8])
    >>> model.compile(optimizer=keras.optimizers.Adam(1e-3))
    >>> history = model.fit(x, batch_size=16, epochs=1, verbose=0)
    >>> bool(np.isfinite(history.history["loss"][0]))
    True
    >>> model.log_prob(x[:4]).shape, model.sample(3, seed=0).shape
    (TensorShape([4]), TensorShape([3, 2]))

    #### References

    [1] Germain, Gregor, Murray, Larochelle. MADE: Masked Autoencoder for
        Distribution Estimation. ICML 2015. https://arxiv.org/abs/1502.03509
    """

    fixed_keywords = ("num_layers", "batch_norm")
    retired_config_keys = ("num_components",)

    def __init__(self, event_size: int, **kwargs):
        self.refuse_fixed(kwargs)
        super().__init__(event_size, num_layers=1, batch_norm=False, **kwargs)

    def get_config(self):
        config = super().get_config()
        for key in self.fixed_keywords:
            del config[key]
        return config

    @classmethod
    def from_config(cls, config):
        # 0.3.0 and 0.4.0 saved MADE's fixed keywords: one layer, no batch norm.
        config = dict(config)
        if (config.pop("num_layers", 1), config.pop("batch_norm", False)) != (1, False):
            raise ValueError("this MADE was saved with several layers or batch norms: load it as a MAF "
                             "(num_layers=K, batch_norm=False), which is what it computed.")
        return super().from_config(config)


@keras.saving.register_keras_serializable(package="keras_models")
class NSF(_MADEStack):
    """NSF (K): K autoregressive rational-quadratic spline layers, a batch norm after each.

    A neural spline flow (Durkan et al. 2019), autoregressive form: the `MAF` with each
    affine map replaced by a monotonic spline of ``bins`` bins on ``[-bound, bound]``
    (the identity beyond), its bins and slopes given by the MADE
    (`tfp_maf.MaskedRationalQuadraticSpline`):

        u = x;  for k = 1..K:  u_i = s(u_i; theta_i(u_<i));  u = BN_k(u)
        log p(x) = log N(u | 0, I) + sum of the layers' log-dets

    A spline bends a marginal where an affine map can only shift and scale it, so one
    layer fits skewed and two-humped conditionals (``docs/splines.md``). ``log_prob``
    costs K MADE passes; ``sample`` is exact, each layer about one MADE pass
    (`tfp_maf.sampling`), as for the MAF.

    Not in the paper: `keras_models.training` trains it as the paper trains the flows
    (Adam at ``1e-4``, early stopping).

    Args:
      event_size: ``D``, the number of variables.
      bins: the spline's bins (8, as zuko's and nflows' defaults).
      bound: the spline acts on ``[-bound, bound]`` (5: zuko's default, for
        standardised data; the batch norms keep later layers' inputs standardised).
      **kwargs: ``num_layers`` (5 by default), ``batch_norm``, the flows' keywords
        and the MADE options but ``scale_parameterization`` (as `MAF`: the spline's
        MADE has no scale outputs), and Keras' ``name``, ``dtype``, ``trainable``.

    Raises:
      TypeError: for any other keyword (``log_scale_bound``: a spline has no
        log-scale to bound).
      ValueError: if ``bins < 1`` or ``bound <= 0``, or as `MAF`.

    Example:

    >>> import keras, numpy as np
    >>> from keras_models import NSF
    >>> x = np.random.default_rng(0).standard_normal((32, 2)).astype(np.float32)
    >>> model = NSF(2, num_layers=2, hidden_units=[8])
    >>> model.compile(optimizer=keras.optimizers.Adam(1e-3))
    >>> history = model.fit(x, batch_size=16, epochs=1, verbose=0)
    >>> bool(np.isfinite(history.history["loss"][0]))
    True
    >>> model.log_prob(x[:4]).shape, model.sample(3, seed=0).shape
    (TensorShape([4]), TensorShape([3, 2]))

    #### References

    [1] Durkan, Bekasov, Murray, Papamakarios. Neural Spline Flows. NeurIPS 2019.
        https://arxiv.org/abs/1906.04032
    """

    fixed_keywords = ("scale_parameterization",)
    # Saved by 0.3.0 and 0.4.0; the spline used none of them.
    retired_config_keys = ("log_scale_bound", "num_components", "scale_parameterization")

    def __init__(self, event_size: int, *, bins: int = 8, bound: float = 5.0, **kwargs):
        self.refuse_fixed(kwargs)
        num_spline_params(bins)  # refuses bins < 1 before anything is built
        if not float(bound) > 0:
            raise ValueError(f"bound must be positive, got {bound}.")
        self.bins, self.bound = int(bins), float(bound)
        kwargs.setdefault("name", "nsf")
        super().__init__(event_size, **kwargs)

    def _made(self, order, name, num_components=None, seed=0, params=None):
        return super()._made(order, name, num_components, seed, params=num_spline_params(self.bins))

    def _layer(self, i, made):
        return tfp_maf.MaskedRationalQuadraticSpline(made, self.bins, self.bound, name=f"spline_{i}")

    def get_config(self):
        config = super().get_config()
        del config["scale_parameterization"]
        config.update(bins=self.bins, bound=self.bound)
        return config


class _MixtureBase:
    """What the models on a `tfp_maf.MADEMoG` base share: ``num_components``, and noise
    with a Gumbel part."""

    def __init__(self, event_size: int, *, num_components: int = 10, **kwargs):
        if int(num_components) < 1:
            raise ValueError(f"num_components must be >= 1, got {num_components}.")
        self.num_components = int(num_components)  # read by the constructors below
        super().__init__(event_size, **kwargs)

    @property
    def mixture_components(self) -> int:
        return self.num_components

    def _base_from_noise(self, noise, y, gumbel):
        return self._base(y).sample_from_noise(noise, gumbel)

    def get_config(self):
        config = super().get_config()
        config.update(num_components=self.num_components)
        return config


@keras.saving.register_keras_serializable(package="keras_models")
class MAFMoG(_MixtureBase, MAF):
    """MAF MoG (K): a MAF (K) whose base is a MADE MoG with C components.

    Section 4 of the paper: the base density of a `MAF` is a `MADEMoG` instead of
    N(0, I), which the paper found best on several datasets (MAF MoG (5), C = 10).
    The base MADE's order continues the alternation of the MAF layers. Like every
    MADE MoG, it is not reparameterized (`tfp_maf.MADEMoG`).

    Args:
      event_size: ``D``, the number of variables.
      **kwargs: ``num_components``, below; the keywords of `MAF` (``num_layers``: 5 in the paper;
        ``log_scale_bound`` bounds the MAF layers', not the mixture's; ``seed``:
        MADE ``i`` gets ``seed + i``, the base ``seed + K``), and Keras' ``name``,
        ``dtype``, ``trainable``.

    Keyword Args:
      num_components: ``C``, the Gaussians of each conditional of the base
        (10 in the paper).

    Raises:
      TypeError: for any other keyword.
      ValueError: as `MAF`, or if ``num_components < 1``.

    Example:

    >>> import keras, numpy as np
    >>> from keras_models import MAFMoG
    >>> x = np.random.default_rng(0).standard_normal((32, 2)).astype(np.float32)
    >>> model = MAFMoG(2, num_layers=2, num_components=2, hidden_units=[8])
    >>> model.compile(optimizer=keras.optimizers.Adam(1e-3))
    >>> history = model.fit(x, batch_size=16, epochs=1, verbose=0)
    >>> bool(np.isfinite(history.history["loss"][0]))
    True
    >>> model.log_prob(x[:4]).shape, model.sample(3, seed=0).shape
    (TensorShape([4]), TensorShape([3, 2]))
    """

    retired_config_keys = ()  # it used every key it saved

    def __init__(self, event_size: int, **kwargs):
        kwargs.setdefault("name", "maf_mog")  # Keras would say "maf_mo_g"
        super().__init__(event_size, **kwargs)
        order = _orders(self.num_layers + 1)[-1]
        self.base_made = self._made(order, "made_mog", self.num_components, seed=self.seed + self.num_layers)

    def _base(self, y):
        return tfp_maf.MADEMoG(self.base_made, conditional_input=y)


@keras.saving.register_keras_serializable(package="keras_models")
class MADEMoG(_MixtureBase, _MADEFlow):
    """MADE MoG: a MADE whose conditionals are mixtures of C Gaussians (C = 10).

    Section 4 of the paper (`tfp_maf.MADEMoG` holds the maths):

        p(x) = prod_i sum_c w_ic N(x_i | m_ic, exp(a_ic)^2),
        (logits_i, m_i, a_i) = f_i(x_<i),  w_i = softmax(logits_i)

    in the data's order, one MADE pass per ``log_prob``. The paper trains it with
    Adam at ``1e-3`` (`keras_models.training.compile_as_paper` with ``"made-mog"``).
    Its samples are not reparameterized (the component choice is discrete).

    Args:
      event_size: ``D``, the number of variables.
      **kwargs: ``num_components``, below; the flows' keywords (``seed`` seeds the
        random hidden degrees and initial weights) and the MADE options
        (``scale_parameterization``: what its scale outputs are), as `MAF`, and
        Keras' ``name``, ``dtype``, ``trainable``.

    Keyword Args:
      num_components: ``C``, the Gaussians of each conditional (10 in the paper).

    Raises:
      TypeError: for any other keyword (``num_layers``: a MADE MoG is one MADE;
        ``log_scale_bound``: its mixture is not bounded).
      ValueError: as `MAF`, or if ``num_components < 1``.

    Example:

    >>> import keras, numpy as np
    >>> from keras_models import MADEMoG
    >>> x = np.random.default_rng(0).standard_normal((32, 2)).astype(np.float32)
    >>> model = MADEMoG(2, num_components=2, hidden_units=[8])
    >>> model.compile(optimizer=keras.optimizers.Adam(1e-3))
    >>> history = model.fit(x, batch_size=16, epochs=1, verbose=0)
    >>> bool(np.isfinite(history.history["loss"][0]))
    True
    >>> model.log_prob(x[:4]).shape, model.sample(3, seed=0).shape
    (TensorShape([4]), TensorShape([3, 2]))
    """

    retired_config_keys = ("num_layers", "log_scale_bound")  # saved by 0.3.0 and 0.4.0, unused

    def __init__(self, event_size: int, **kwargs):
        kwargs.setdefault("name", "made_mog")  # Keras would say "made_mo_g"
        super().__init__(event_size, **kwargs)
        self.made = self._made("left-to-right", "made_mog", self.num_components, seed=self.seed)

    def _bijectors(self):
        return []  # the MADE MoG is the whole model: its base

    def _base(self, y):
        return tfp_maf.MADEMoG(self.made, conditional_input=y)

    def _distribution(self, y, training):
        return self._base(self.context(y, training))  # the MADE MoG itself, not a transformed one


@keras.saving.register_keras_serializable(package="keras_models")
class RealNVP(_FlowModel):
    """Real NVP (K): K coupling layers alternating parity, a batch norm after each.

    The paper's general-purpose Real NVP (Dinh et al. 2017; section 3.3): each
    layer is a `tfp_maf.AffineCoupling` that copies half the variables and scales
    and shifts the other half,

        x_t' = x_t exp(alpha(x_c)) + mu(x_c)

    where ``alpha`` is a network with tanh hidden units and ``mu`` one with relu
    hidden units (`tfp_maf.CouplingNetworks`); layer ``k`` copies the even
    positions when ``k`` is even, the odd ones otherwise. Both directions cost one
    pass of each layer's networks. The paper trains Real NVP (5) and (10) with
    Adam at ``1e-4``.

    Args:
      event_size: ``D``, the number of variables, at least 2.
      num_layers: ``K``, the coupling layers (5 or 10 in the paper).
      log_scale_bound: None (the paper) or a soft bound ``B`` on the log-scales.
      **kwargs: the flows' keywords (``hidden_units`` of every network;
        ``conditional_dims``: ``y`` is concatenated to the copied half;
        ``context_network``; ``l2``; ``seed``: coupling ``i`` gets ``seed + i``),
        and Keras' ``name``, ``dtype``, ``trainable``.

    Raises:
      TypeError: for any other keyword: the MADE options (``activation`` among
        them: the networks' activations are the paper's, fixed) and
        ``num_components``.
      ValueError: if ``event_size < 2`` or the dtype policy is neither float32
        nor float64.

    Example:

    >>> import keras, numpy as np
    >>> from keras_models import RealNVP
    >>> x = np.random.default_rng(0).standard_normal((32, 2)).astype(np.float32)
    >>> model = RealNVP(2, num_layers=2, hidden_units=[8])
    >>> model.compile(optimizer=keras.optimizers.Adam(1e-3))
    >>> history = model.fit(x, batch_size=16, epochs=1, verbose=0)
    >>> bool(np.isfinite(history.history["loss"][0]))
    True
    >>> model.log_prob(x[:4]).shape, model.sample(3, seed=0).shape
    (TensorShape([4]), TensorShape([3, 2]))

    #### References

    [1] Dinh, Sohl-Dickstein, Bengio. Density estimation using Real NVP.
        ICLR 2017. https://arxiv.org/abs/1605.08803
    """

    # Saved by 0.3.0 and 0.4.0, which took the zoo's common keywords and used none of these.
    retired_config_keys = (
        "activation", "hidden_degrees", "kernel_blocks", "kernel_blocks_device", "initialization",
        "conditional_input_layers", "scale_parameterization", "num_components",
    )

    def __init__(self, event_size: int, *, num_layers: int = 5, log_scale_bound: float | None = None, **kwargs):
        super().__init__(event_size, **kwargs)
        if self.event_size < 2:
            raise ValueError(f"Real NVP needs at least 2 variables, got {self.event_size}.")
        self.num_layers = int(num_layers)
        self.log_scale_bound = log_scale_bound
        self.parities = ["even" if i % 2 == 0 else "odd" for i in range(self.num_layers)]
        self.couplings = []
        for i, parity in enumerate(self.parities):
            copied, transformed = tfp_maf.coupling_partition(self.event_size, parity)
            self.couplings.append(
                tfp_maf.CouplingNetworks(
                    len(copied), len(transformed), self.hidden_units,
                    conditional_dims=self.context_dims,
                    kernel_regularizer=_regularizer(self.l2), seed=self.seed + i, dtype=self.dtype_policy,
                    name=f"coupling_{i}",
                )
            )
        self.norms = [self._batch_norm(i) for i in range(self.num_layers)]

    def _bijectors(self):
        bijectors = []
        for i, (nets, parity) in enumerate(zip(self.couplings, self.parities, strict=True)):
            bijectors.append(
                tfp_maf.AffineCoupling(
                    nets, self.event_size, parity, name=f"coupling_{i}",
                    log_scale_bound=self.log_scale_bound,
                )
            )
            bijectors.append(self.norms[i].bijector())
        return bijectors

    def get_config(self):
        config = super().get_config()
        config.update(num_layers=self.num_layers, log_scale_bound=self.log_scale_bound)
        return config


MODELS = {
    "gaussian": (Gaussian, {}),
    "made": (MADE, {}),
    "made-mog": (MADEMoG, {}),
    "realnvp5": (RealNVP, {"num_layers": 5}),
    "realnvp10": (RealNVP, {"num_layers": 10}),
    "maf5": (MAF, {"num_layers": 5}),
    "maf10": (MAF, {"num_layers": 10}),
    "maf-mog5": (MAFMoG, {"num_layers": 5}),
    "nsf5": (NSF, {"num_layers": 5}),
}

# The paper's step sizes (section 4): 1e-3 for MADE and MADE MoG, 1e-4 for the flows.
LEARNING_RATES = {"made": 1e-3, "made-mog": 1e-3}


def build(name: str, event_size: int, **kwargs) -> DensityModel:
    """A zoo model by its command-line name (``maf5``, ``made-mog``, ...).

    | name | model |
    |---|---|
    | ``gaussian`` | `Gaussian` |
    | ``made`` | `MADE` |
    | ``made-mog`` | `MADEMoG` |
    | ``realnvp5``, ``realnvp10`` | `RealNVP` with 5 or 10 layers |
    | ``maf5``, ``maf10`` | `MAF` with 5 or 10 layers |
    | ``maf-mog5`` | `MAFMoG` with 5 layers |
    | ``nsf5`` | `NSF` with 5 layers |

    Args:
      name: one of the names above.
      event_size: ``D``, the number of variables.
      **kwargs: the model's keywords (`model_keywords` of the name); they override
        the name's preset (e.g. ``num_layers``).

    Returns:
      The model, not compiled (`keras_models.training.compile_as_paper` uses the
      same name for the paper's step size).

    Raises:
      ValueError: for an unknown name, or as the model's constructor.
      TypeError: for a keyword the model does not take.

    Example:

    >>> from keras_models import build
    >>> model = build("realnvp10", 4, hidden_units=[8])
    >>> type(model).__name__, model.num_layers, model.event_size
    ('RealNVP', 10, 4)
    >>> build("gaussian", 4, hidden_units=[8])
    Traceback (most recent call last):
    ...
    TypeError: Gaussian takes no keyword 'hidden_units': it takes conditional_dims, name, dtype, trainable.
    """
    cls, preset = _model_class(name)
    return cls(event_size, **{**preset, **kwargs})


def model_keywords(name: str) -> tuple[str, ...]:
    """The keywords `build` takes for the model ``name`` (`keras_models.density_model.keywords`).

    Example:

    >>> "activation" in model_keywords("maf5"), "activation" in model_keywords("realnvp5")
    (True, False)
    """
    return keywords(_model_class(name)[0])


def _model_class(name: str):
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; expected one of {sorted(MODELS)}.")
    return MODELS[name]
