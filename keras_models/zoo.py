"""The paper's models as Keras 3 models.

| model | paper section | class |
|---|---|---|
| Gaussian (full covariance; class-conditional) | Tables 1, 2 baseline | `Gaussian` |
| MADE, Gaussian conditionals (Germain et al. 2015) | 2.1, 4 | `MADE` |
| MADE MoG, C = 10 | 4 | `MADEMoG` |
| Real NVP (5 / 10) (Dinh et al. 2017) | 3.3, 4 | `RealNVP` |
| MAF (5 / 10) | 3 | `MAF` |
| MAF MoG (5) | 4 | `MAFMoG` |

One constructor convention: ``D`` first, then keywords ``hidden_units``,
``num_layers``, ``num_components``, ``activation``, ``conditional_dims``.
As in the paper: the first MAF layer uses the data's order and each next one
reverses it; a batch norm follows every autoregressive / coupling layer (so
one sits between every two layers and before the base); L2 penalty 1e-6 on
every kernel. The defaults suit small data.
"""

from __future__ import annotations

from collections.abc import Sequence

import keras
import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

import tfp_maf
from keras_models import _kernel_layout
from keras_models.density_model import DensityModel
from tfp_maf._devices import check_device_kind
from tfp_maf.bijectors._cache import GraphLocalChain

tfd = tfp.distributions

__all__ = ["MADE", "MAF", "Gaussian", "MADEMoG", "MAFMoG", "RealNVP", "build"]

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

    Call `fit_closed_form(x, y)`: maximum-likelihood mean and covariance
    (one per class for the conditional model, ``y`` one-hot). Nothing is
    trained by gradient descent.
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
        self.fit_closed_form(x, y)
        return True

    def fit_closed_form(self, x, y=None, jitter: float = 1e-6) -> Gaussian:
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

    def _distribution(self, y, training):
        if self.conditional_dims is None:
            return tfd.MultivariateNormalTriL(loc=self.loc[0], scale_tril=self.scale_tril[0])
        # A mixture over the class Gaussians with weights y: a one-hot y selects its class
        # exactly, and memory stays K x D x D (per-example scale matrices would take
        # N x D x D: 24 GB for the MNIST test set).
        classes = tfd.MultivariateNormalTriL(loc=self.loc, scale_tril=self.scale_tril)
        return tfd.MixtureSameFamily(tfd.Categorical(probs=y), classes)


class _FlowModel(DensityModel):
    """Shared plumbing of the flow models: kwargs routing and config.

    ``kernel_blocks``, ``kernel_blocks_device``: the MADEs' storage
    (`tfp_maf.MADENetwork`): ``"auto"`` stores large kernels in degree blocks on a CPU
    and dense on a GPU, 1 all dense; the densities are the same. A saved model loads
    with the storage it was saved with (the config records the device kind "auto"
    chose for), so its optimizer state fits. Weights files
    (``load_weights``, a run's backup) load into any storage, optimizer state included.
    """

    def __init__(
        self,
        event_size: int,
        hidden_units: Sequence[int] = (64, 64),
        num_layers: int = 5,
        num_components: int = 10,
        activation: str = "relu",
        conditional_dims: int | None = None,
        l2: float = L2,
        seed: int = 0,
        log_scale_bound: float | None = None,
        hidden_degrees: str = "sequential",
        kernel_blocks: int | str = "auto",
        kernel_blocks_device: str | None = None,
        **kwargs,
    ):
        super().__init__(event_size, conditional_dims, **kwargs)
        self.kernel_blocks = kernel_blocks
        self.kernel_blocks_device = check_device_kind(kernel_blocks_device)
        self.hidden_units = [int(h) for h in hidden_units]
        self.num_layers = int(num_layers)
        self.num_components = int(num_components)
        self.activation = activation
        self.l2 = float(l2)
        self.seed = int(seed)
        self.log_scale_bound = log_scale_bound
        self.hidden_degrees = hidden_degrees

    def _made(self, order, name, num_components=None, seed=0):
        return tfp_maf.MADENetwork(
            self.event_size, self.hidden_units, num_components=num_components,
            activation=self.activation, order=order, conditional_dims=self.conditional_dims,
            hidden_degrees=self.hidden_degrees, seed=seed, kernel_regularizer=_regularizer(self.l2),
            kernel_blocks=self.kernel_blocks, kernel_blocks_device=self.kernel_blocks_device,
            dtype=self.dtype_policy, name=name,
        )

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
        # A `tfb.Chain` whose cache entries die with the model's traces (`GraphLocalChain`).
        flow = tfd.TransformedDistribution(self._base(y), GraphLocalChain(self._bijectors()))
        return tfp_maf.bind_kwargs(flow, y, training)

    def get_config(self):
        config = super().get_config()
        config.update(
            hidden_units=self.hidden_units, num_layers=self.num_layers,
            num_components=self.num_components, activation=self.activation, l2=self.l2,
            seed=self.seed, log_scale_bound=self.log_scale_bound,
            hidden_degrees=self.hidden_degrees,
            kernel_blocks=self.kernel_blocks, kernel_blocks_device=self.kernel_blocks_device,
        )
        return config


def _orders(num_layers):
    """First layer in the data's order, each next one reversed."""
    return ["left-to-right" if i % 2 == 0 else "right-to-left" for i in range(num_layers)]


@keras.saving.register_keras_serializable(package="keras_models")
class MAF(_FlowModel):
    """MAF (K): K MADE layers, a batch norm after each, standard normal base."""

    def __init__(self, event_size: int, *, num_layers: int = 5, batch_norm: bool = True, **kwargs):
        super().__init__(event_size, num_layers=num_layers, **kwargs)
        self.batch_norm = bool(batch_norm)
        self.mades = [
            self._made(order, f"made_{i}", seed=self.seed + i)
            for i, order in enumerate(_orders(self.num_layers))
        ]
        self.norms = [self._batch_norm(i) for i in range(self.num_layers)] if self.batch_norm else []

    def _bijectors(self):
        out = []
        for i, made in enumerate(self.mades):
            out.append(tfp_maf.MaskedAutoregressive(made, name=f"maf_{i}", log_scale_bound=self.log_scale_bound))
            if self.norms:
                out.append(self.norms[i].bijector())
        return out

    def get_config(self):
        config = super().get_config()
        config.update(batch_norm=self.batch_norm)
        return config


@keras.saving.register_keras_serializable(package="keras_models")
class MADE(MAF):
    """MADE with Gaussian conditionals: a one-layer MAF without batch norm."""

    def __init__(self, event_size: int, **kwargs):
        kwargs.setdefault("num_layers", 1)
        kwargs.setdefault("batch_norm", False)
        super().__init__(event_size, **kwargs)


@keras.saving.register_keras_serializable(package="keras_models")
class MAFMoG(MAF):
    """MAF MoG (K): a MAF (K) whose base is a MADE MoG with C components."""

    def __init__(self, event_size: int, **kwargs):
        kwargs.setdefault("name", "maf_mog")  # Keras would say "maf_mo_g"
        super().__init__(event_size, **kwargs)
        order = _orders(self.num_layers + 1)[-1]
        self.base_made = self._made(order, "made_mog", self.num_components, seed=self.seed + self.num_layers)

    def _base(self, y):
        return tfp_maf.MADEMoG(self.base_made)  # bound to y with the bijectors (`bind_kwargs`)


@keras.saving.register_keras_serializable(package="keras_models")
class MADEMoG(_FlowModel):
    """MADE MoG: a MADE whose conditionals are mixtures of C Gaussians (C = 10)."""

    def __init__(self, event_size: int, **kwargs):
        kwargs.setdefault("num_layers", 1)
        kwargs.setdefault("name", "made_mog")  # Keras would say "made_mo_g"
        super().__init__(event_size, **kwargs)
        self.made = self._made("left-to-right", "made_mog", self.num_components, seed=self.seed)

    def _distribution(self, y, training):
        return tfp_maf.MADEMoG(self.made, conditional_input=y)


@keras.saving.register_keras_serializable(package="keras_models")
class RealNVP(_FlowModel):
    """Real NVP (K): K coupling layers alternating parity, a batch norm after each."""

    def __init__(self, event_size: int, *, num_layers: int = 5, **kwargs):
        super().__init__(event_size, num_layers=num_layers, **kwargs)
        if self.event_size < 2:
            raise ValueError(f"Real NVP needs at least 2 variables, got {self.event_size}.")
        self.parities = ["even" if i % 2 == 0 else "odd" for i in range(self.num_layers)]
        self.couplings = []
        for i, parity in enumerate(self.parities):
            copied, transformed = tfp_maf.coupling_partition(self.event_size, parity)
            self.couplings.append(
                tfp_maf.CouplingNetworks(
                    len(copied), len(transformed), self.hidden_units,
                    conditional_dims=self.conditional_dims,
                    kernel_regularizer=_regularizer(self.l2), dtype=self.dtype_policy, name=f"coupling_{i}",
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


MODELS = {
    "gaussian": (Gaussian, {}),
    "made": (MADE, {}),
    "made-mog": (MADEMoG, {}),
    "realnvp5": (RealNVP, {"num_layers": 5}),
    "realnvp10": (RealNVP, {"num_layers": 10}),
    "maf5": (MAF, {"num_layers": 5}),
    "maf10": (MAF, {"num_layers": 10}),
    "maf-mog5": (MAFMoG, {"num_layers": 5}),
}

# The paper's step sizes (section 4): 1e-3 for MADE and MADE MoG, 1e-4 for the flows.
LEARNING_RATES = {"made": 1e-3, "made-mog": 1e-3}


def build(name: str, event_size: int, **kwargs) -> DensityModel:
    """A zoo model by its command-line name (``maf5``, ``made-mog``, ...)."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; expected one of {sorted(MODELS)}.")
    cls, preset = MODELS[name]
    if cls is Gaussian:  # fitted in closed form: no hyper-parameters but Keras' own
        keep = ("conditional_dims", "dtype", "name")
        return Gaussian(event_size, **{k: v for k, v in kwargs.items() if k in keep})
    return cls(event_size, **{**preset, **kwargs})
