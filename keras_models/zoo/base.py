"""What every model of the zoo shares: `FlowModel`, the base of the flows (their
hidden sizes, ``y``'s width and embedding, the L2 penalty, the seed), the paper's L2
penalty and the standard normal base."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import keras
import tensorflow as tf
import tensorflow_probability as tfp

import tfp_maf
from keras_models import kernel_storage
from keras_models.density_model import DensityModel
from keras_models.training_data import check_training_data
from tfp_maf.arguments import check_bool, check_bound, check_int, check_ints
from tfp_maf.bijectors import GraphLocalChain
from tfp_maf.math import broadcast_batch, rows_aligned

tfd = tfp.distributions

__all__ = ["L2", "LOG_SCALE_BOUND", "TAILS", "FlowModel", "regularizer", "standard_normal"]

L2 = 1e-6
#: Where a flow's log tails start (`tfp_maf.LogTails`), in the standardised columns' units
#: (the data's, for a flow with ``standardize=False``): beyond it a row's distance
#: reaches the networks as its logarithm, so a row far from the data scores finite.
#: Within it the flow is exactly the flow without them; the paper's protocol
#: (`keras_models.experiment`) builds its flows without them.
TAILS = 20.0
#: The affine flows' and mixtures' default soft bound on their log-scales
#: (`tfp_maf.math.soft_bound`): each is the network's own within +-4 (a scale from 1/55
#: to 55 a layer) and saturates at +-8, so that, with the log tails, a row far from the
#: data scores finite and lower the farther it is (an unbounded log-scale of a ReLU
#: network grows with the distance, and its exp overflows). The paper's protocol
#: (`keras_models.experiment`) leaves them unbounded.
LOG_SCALE_BOUND = 8.0


def regularizer(l2):
    """The kernels' L2 penalty, or None for ``l2 = 0``."""
    return keras.regularizers.L2(l2) if l2 else None


def standard_normal(event_size, dtype, y=None):
    """N(0, I) over ``D`` variables, with the batch shape of ``y`` (if given), so that a
    distribution p(x | y) draws one ``x`` per row of ``y``."""
    batch = tf.zeros([0], tf.int32) if y is None else tf.shape(y)[:-1]
    # Independent normals, not `tfd.MultivariateNormalDiag`: the same density and draws,
    # with no TFP bijector inside, whose process-wide cache would keep every trace.
    loc = tf.zeros(tf.concat([batch, [event_size]], 0), dtype=dtype)
    return tfd.Independent(tfd.Normal(loc=loc, scale=tf.ones([], dtype)), reinterpreted_batch_ndims=1)



class FlowModel(DensityModel):
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
        standardize: bool = True,
        tails: float | None = TAILS,
        dequantize=None,
        **kwargs,
    ):
        super().__init__(event_size, conditional_dims, **kwargs)
        self.standardize = check_bool(standardize, "standardize")
        #: The columns' statistics, set by the first ``fit`` (or `adapt`), or None.
        self.standardization = (tfp_maf.Standardization(event_size, self.conditional_dims, dtype=self.dtype_policy,
                                                        name="standardization") if self.standardize else None)
        self.tails = check_bound(tails, "tails")
        self.dequantize = _checked_columns(dequantize, self.event_size)
        self.context_network = context_network
        #: The width of what the flow's networks read: y's, or its embedding's.
        self.context_dims = self._context_dims(context_network)
        self.hidden_units = check_ints(hidden_units, "hidden_units")
        self.l2 = check_bound(l2, "l2", optional=False, zero=True)
        self.seed = check_int(seed, "seed", minimum=0)

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
        """``y`` as the flow's layers read it: standardised (``standardize=True``), then
        embedded by the context network, for any batch shape (`DensityModel.context`)."""
        if y is not None and self.standardization is not None:
            y = self.standardization.standardize_y(y)
        if y is None or self.context_network is None:
            return y
        flat = tf.reshape(y, [-1, self.conditional_dims])
        flat = tf.cast(flat, self.context_network.compute_dtype)
        embedding = tf.cast(self.context_network(flat, training=training), self.compute_dtype)
        return tf.reshape(embedding, tf.concat([tf.shape(y)[:-1], [self.context_dims]], 0))

    def _batch_norm(self, i):
        return tfp_maf.BatchNormState(self.event_size, dtype=self.dtype_policy, name=f"batch_norm_{i}")

    def load_weights(self, filepath, skip_mismatch=False, **kwargs):
        with kernel_storage.matching_weights(filepath, self) as path:
            super().load_weights(path, skip_mismatch=skip_mismatch, **kwargs)

    # A weights file records the storage its MADE kernels were written in, so that loading
    # reads it rather than infer it (`keras_models.kernel_storage`).
    def save_own_variables(self, store):
        super().save_own_variables(store)
        kernel_storage.save_record(self, store)

    def load_own_variables(self, store):
        super().load_own_variables(kernel_storage.load_without_record(store))

    def _bijectors(self) -> list:
        """The flow's bijectors after the standardisation, data side first (TFP's `Chain` order)."""
        raise NotImplementedError

    def _chain(self) -> list:
        """Every bijector of the flow, data side first: the standardisation and the log
        tails (where the model has them), then `_bijectors`."""
        parts = self._bijectors()
        if self.tails is not None:
            parts = [tfp_maf.LogTails(self.tails), *parts]
        return parts if self.standardization is None else [self.standardization.bijector(), *parts]

    def adapt(self, x, y=None) -> None:
        """Sets the statistics the flow standardises ``x`` (and ``y``) with: each column's
        mean and standard deviation over the rows given, after the checks of
        `keras_models.training_data` (non-finite rows, constant and repeated columns).

        The first ``fit`` of a model with ``standardize=True`` calls it on its training
        rows (a `tf.data` dataset: one pass as it streams); later fits keep the
        statistics, which are part of the model (saved, loaded and exported with it).
        Call it before training on other data only: the weights were trained for the
        statistics they saw.

        Args:
          x: ``[N, D]`` rows, or a `tf.data.Dataset` of ``x`` or ``(x, y)`` batches.
          y: ``[N, K]`` for a conditional model given arrays.

        Raises:
          ValueError: if the model has ``standardize=False``, or as ``fit`` refuses
            the data.

        Example:

        >>> import numpy as np
        >>> from keras_models import MAF
        >>> x = np.random.default_rng(0).normal(1e5, 1e3, (200, 2)).astype(np.float32)
        >>> model = MAF(2, num_layers=1, hidden_units=[8])
        >>> model.adapt(x)
        >>> np.round(model.standardization.x_scale.numpy() / 1e3, 1).tolist()
        [1.0, 1.0]
        """
        if self.standardization is None:
            raise ValueError(f"{self.name} was built with standardize=False: it has no statistics to adapt.")
        self._set_standardization(check_training_data(self, {"x": x, "y": y}))

    @property
    def _needs_statistics(self) -> bool:
        return self.standardization is not None and not self.standardization.adapted

    def _prepare_for_training(self, surveys) -> None:
        if self.standardization is not None and not self.standardization.adapted:
            if surveys is None:
                raise ValueError(
                    f"{self.name} standardises its columns (standardize=True), and fit got data it cannot read "
                    "ahead (a generator or PyDataset): call model.adapt(x, y) first with arrays or a "
                    "tf.data.Dataset, or build the model with standardize=False.")
            self._set_standardization(surveys)

    def _set_standardization(self, surveys) -> None:
        if surveys is None:
            raise TypeError(f"{self.name}: adapt takes arrays [N, D] or a tf.data.Dataset.")
        x_survey, y_survey = surveys
        if (y_survey is None) != (self.conditional_dims is None):
            raise ValueError(f"{self.name}: " + ("y was given to an unconditional model." if y_survey is not None
                                                 else f"it is conditional on y with {self.conditional_dims} "
                                                 "columns: pass (x, y)."))
        x_loc, x_scale = x_survey.loc_and_scale()
        y_stats = {} if y_survey is None else dict(zip(("y_loc", "y_scale"), y_survey.loc_and_scale(), strict=True))
        self.standardization.set_statistics(x_loc, x_scale, **y_stats)

    def _base(self, y) -> tfd.Distribution:
        return standard_normal(self.event_size, self.compute_dtype, y)

    def _distribution(self, y, training):
        y = self.context(y, training)
        # A `tfb.Chain` whose cache entries die with the model's traces (`GraphLocalChain`).
        flow = tfd.TransformedDistribution(self._base(y), GraphLocalChain(self._chain()))
        return tfp_maf.bind_kwargs(flow, y, training)

    def _from_noise(self, noise, y, gumbel):
        y = self.context(y, False)
        x = self._base_from_noise(noise, y, gumbel)  # the base's draw; the bijectors take it to the data
        for bijector in reversed(self._chain()):
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
        aligned = contextlib.nullcontext()
        if y is not None:  # broadcast once here, not again in each network and its gradient
            u, y = broadcast_batch(x, y)
            aligned = rows_aligned()
        with aligned:
            for bijector in self._chain():  # data side first
                u, part = bijector.inverse_and_log_det(u, **tfp_maf.flow_kwargs(bijector, y, training))
                log_det += part
            return self._base(y).log_prob(u) + log_det

    def get_config(self):
        config = super().get_config()
        config.update(
            hidden_units=self.hidden_units, l2=self.l2, seed=self.seed, standardize=self.standardize,
            tails=self.tails, dequantize=self.dequantize,
            context_network=(None if self.context_network is None
                             else keras.saving.serialize_keras_object(self.context_network)),
        )
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        # Saved by 0.4.0 and before, which had neither: the same densities.
        config.setdefault("standardize", False)
        config.setdefault("tails", None)
        if isinstance(config.get("context_network"), dict):
            config["context_network"] = keras.saving.deserialize_keras_object(config["context_network"])
        return super().from_config(config)


def _checked_columns(columns, event_size: int):
    """``dequantize``: None, True (every column) or column indices, as a sorted list."""
    if columns is None or columns is False:
        return None
    if columns is True:
        return list(range(event_size))
    try:
        out = sorted({int(c) for c in columns})
    except (TypeError, ValueError):
        raise ValueError(f"dequantize must be None, True or a list of column indices, got {columns!r}.") from None
    if not out or out[0] < 0 or out[-1] >= event_size:
        raise ValueError(f"dequantize must list columns in [0, {event_size}), got {columns!r}.")
    return out
