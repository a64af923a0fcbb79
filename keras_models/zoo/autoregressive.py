"""The autoregressive flows of the zoo: MADE, MADE MoG, MAF, MAF MoG and NSF.

`MADEFlow` holds the MADE options, declared once for every model built of MADEs; `MADEStack`
stacks MADEs with batch norms between them; `MixtureBase` gives a model a MADE MoG base.
"""

from __future__ import annotations

import keras

import tfp_maf
from keras_models.initialization import made_initializers
from keras_models.zoo.base import LOG_SCALE_BOUND, FlowModel, regularizer
from tfp_maf.arguments import check_bool, check_bound, check_int
from tfp_maf.layers import check_conditional_input_layers, check_scale_parameterization
from tfp_maf.layers.made import legacy_kernel_blocks
from tfp_maf.splines import num_spline_params

__all__ = ["MADE", "MAF", "NSF", "MADEFlow", "MADEMoG", "MADEStack", "MAFMoG", "MixtureBase"]


class MADEFlow(FlowModel):
    """The MADE options, declared once: every model whose layers are MADEs
    (`tfp_maf.MADENetwork`) takes them, and each MADE it builds gets them.

    ``activation``, ``hidden_degrees``, ``kernel_blocks``, ``kernel_blocks_device``,
    ``initialization``, ``conditional_input_layers``, ``scale_parameterization``: the
    module docstring says what each means. ``kernel_blocks`` also takes what a config saves:
    each MADE's counts by name (``{"made_0": [1, 1, 1], ...}``, decided when it was built).
    """

    def __init__(
        self,
        event_size: int,
        *,
        activation: str = "relu",
        hidden_degrees: str = "sequential",
        kernel_blocks="auto",
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
        # Each MADE decides its storage when built; the config saves `kernel_blocks_by_made`.
        self.kernel_blocks, self.kernel_blocks_device = kernel_blocks, kernel_blocks_device
        self.kernel_blocks_by_made = {}
        self.initialization = initialization
        self.conditional_input_layers = check_conditional_input_layers(conditional_input_layers)
        self.scale_parameterization = check_scale_parameterization(scale_parameterization)

    def _made(self, order, name, num_components=None, seed=0, params=None):
        blocks = self.kernel_blocks
        if isinstance(blocks, dict):  # a saved model's storage, MADE by MADE
            if set(blocks) != set(names := self._made_names()):
                raise ValueError(f"{self.name}: kernel_blocks must name its MADEs {names}, got {sorted(blocks)}.")
            blocks = blocks[name]
        made = tfp_maf.MADENetwork(
            self.event_size, self.hidden_units, num_components=num_components, params=params,
            activation=self.activation, order=order, conditional_dims=self.context_dims,
            hidden_degrees=self.hidden_degrees, seed=seed, kernel_regularizer=regularizer(self.l2),
            conditional_input_layers=self.conditional_input_layers,
            kernel_blocks=blocks, kernel_blocks_device=self.kernel_blocks_device,
            scale_parameterization=self.scale_parameterization,
            dtype=self.dtype_policy, name=name, **made_initializers(self.initialization, num_components),
        )
        self.kernel_blocks_by_made[name] = list(made.kernel_blocks_by_layer)
        return made

    def _made_names(self) -> list[str]:
        """The names of the MADEs the model builds (`_made`'s ``name``): a subclass's."""
        return []

    def get_config(self):
        config = super().get_config()
        config.update(
            activation=self.activation, hidden_degrees=self.hidden_degrees,
            kernel_blocks=dict(self.kernel_blocks_by_made),  # the storage as built
            initialization=self.initialization, conditional_input_layers=self.conditional_input_layers,
            scale_parameterization=self.scale_parameterization,
        )
        return config

    @classmethod
    def from_config(cls, config):
        # The storage it was saved with (0.5.1 and before: `legacy_kernel_blocks`).
        return super().from_config(legacy_kernel_blocks(config))


def _orders(num_layers):
    """First layer in the data's order, each next one reversed."""
    return ["left-to-right" if i % 2 == 0 else "right-to-left" for i in range(num_layers)]


class MADEStack(MADEFlow):
    """K layers on MADEs, a batch norm after each: the MAF and the spline flow.

    Subclasses give `_layer`, the bijector of layer ``i`` on its MADE.
    """

    def __init__(self, event_size: int, *, num_layers: int = 5, batch_norm: bool = True, **kwargs):
        super().__init__(event_size, **kwargs)
        self.num_layers = check_int(num_layers, "num_layers")
        self.batch_norm = check_bool(batch_norm, "batch_norm")
        self.mades = [
            self._made(order, f"made_{i}", seed=self.seed + i)
            for i, order in enumerate(_orders(self.num_layers))
        ]
        self.norms = [self._batch_norm(i) for i in range(self.num_layers)] if self.batch_norm else []

    def _layer(self, i, made):
        raise NotImplementedError

    def _made_names(self):
        return [f"made_{i}" for i in range(self.num_layers)]

    def _bijectors(self):
        out = []
        for i, made in enumerate(self.mades):
            out.append(self._layer(i, made))
            if self.norms:
                out.append(self.norms[i].bijector(keep_epoch_moments=self._keeps_epoch_moments))
        return out

    def get_config(self):
        config = super().get_config()
        config.update(num_layers=self.num_layers, batch_norm=self.batch_norm)
        return config


@keras.saving.register_keras_serializable(package="keras_models")
class MAF(MADEStack):
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
      log_scale_bound: ``B``, 8 by default (`keras_models.zoo.base.LOG_SCALE_BOUND`):
        bounds every log-scale softly to ``+-B`` (`tfp_maf.math.soft_bound`), so that
        rows far from the data score finite; None: unbounded, as in the paper.
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

    def __init__(self, event_size: int, *, log_scale_bound: float | None = LOG_SCALE_BOUND, **kwargs):
        self.log_scale_bound = check_bound(log_scale_bound, "log_scale_bound")  # read by `_layer`, which __init__ calls
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
class NSF(MADEStack):
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
        self.bins = check_int(bins, "bins")  # before anything is built
        self.bound = check_bound(bound, "bound", optional=False)
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


class MixtureBase:
    """What the models on a `tfp_maf.MADEMoG` base share: ``num_components``, and noise
    with a Gumbel part."""

    def __init__(self, event_size: int, *, num_components: int = 10, **kwargs):
        self.num_components = check_int(num_components, "num_components")  # read by the constructors below
        super().__init__(event_size, **kwargs)

    @property
    def mixture_components(self) -> int:
        return self.num_components

    def _base_from_noise(self, noise, y, gumbel):
        return self._base(y).sample_from_noise(noise, gumbel)

    def _made_names(self):
        return [*super()._made_names(), "made_mog"]

    def get_config(self):
        config = super().get_config()
        config.update(num_components=self.num_components)
        return config


@keras.saving.register_keras_serializable(package="keras_models")
class MAFMoG(MixtureBase, MAF):
    """MAF MoG (K): a MAF (K) whose base is a MADE MoG with C components.

    Section 4 of the paper: the base density of a `MAF` is a `MADEMoG` instead of
    N(0, I), which the paper found best on several datasets (MAF MoG (5), C = 10).
    The base MADE's order continues the alternation of the MAF layers. Like every
    MADE MoG, it is not reparameterized (`tfp_maf.MADEMoG`).

    Args:
      event_size: ``D``, the number of variables.
      **kwargs: ``num_components``, below; the keywords of `MAF` (``num_layers``: 5 in the paper;
        ``log_scale_bound`` bounds the MAF layers' and the mixture's log-scales; ``seed``:
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
        return tfp_maf.MADEMoG(self.base_made, conditional_input=y, log_scale_bound=self.log_scale_bound)


@keras.saving.register_keras_serializable(package="keras_models")
class MADEMoG(MixtureBase, MADEFlow):
    """MADE MoG: a MADE whose conditionals are mixtures of C Gaussians (C = 10).

    Section 4 of the paper (`tfp_maf.MADEMoG` holds the maths):

        p(x) = prod_i sum_c w_ic N(x_i | m_ic, exp(a_ic)^2),
        (logits_i, m_i, a_i) = f_i(x_<i),  w_i = softmax(logits_i)

    in the data's order, one MADE pass per ``log_prob``. The paper trains it with
    Adam at ``1e-3`` (`keras_models.training.compile_as_paper` with ``"made-mog"``).
    Its samples are not reparameterized (the component choice is discrete).

    Args:
      event_size: ``D``, the number of variables.
      log_scale_bound: ``B``, 8 by default: bounds every component's log-scale
        softly to ``+-B``, so that rows far from the data score finite; None:
        unbounded, as in the paper.
      **kwargs: ``num_components``, below; the flows' keywords (``seed`` seeds the
        random hidden degrees and initial weights) and the MADE options
        (``scale_parameterization``: what its scale outputs are), as `MAF`, and
        Keras' ``name``, ``dtype``, ``trainable``.

    Keyword Args:
      num_components: ``C``, the Gaussians of each conditional (10 in the paper).

    Raises:
      TypeError: for any other keyword (``num_layers``: a MADE MoG is one MADE).
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

    retired_config_keys = ("num_layers",)  # saved by 0.3.0 and 0.4.0, unused

    def __init__(self, event_size: int, *, log_scale_bound: float | None = LOG_SCALE_BOUND, **kwargs):
        self.log_scale_bound = check_bound(log_scale_bound, "log_scale_bound")
        kwargs.setdefault("name", "made_mog")  # Keras would say "made_mo_g"
        super().__init__(event_size, **kwargs)
        self.made = self._made("left-to-right", "made_mog", self.num_components, seed=self.seed)

    def _bijectors(self):
        return []  # the MADE MoG is the whole model: its base

    def _base(self, y):
        return tfp_maf.MADEMoG(self.made, conditional_input=y, log_scale_bound=self.log_scale_bound)

    def _distribution(self, y, training):
        if self._chain():  # the MADE MoG of standardised columns, or with log tails
            return super()._distribution(y, training)
        return self._base(self.context(y, training))  # the MADE MoG itself, not a transformed one

    def get_config(self):
        config = super().get_config()
        config.update(log_scale_bound=self.log_scale_bound)
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if "standardize" not in config:  # 0.4.0 and before saved a log_scale_bound they did not use
            config["log_scale_bound"] = None
        return super().from_config(config)
