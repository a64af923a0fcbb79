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
from tfp_maf.arguments import check_bound, check_int, check_ints
from tfp_maf.bijectors import GraphLocalChain
from tfp_maf.math import broadcast_batch, rows_aligned

tfd = tfp.distributions

__all__ = ["L2", "FlowModel", "regularizer", "standard_normal"]

L2 = 1e-6


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
        **kwargs,
    ):
        super().__init__(event_size, conditional_dims, **kwargs)
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
        with kernel_storage.matching_weights(filepath, self) as path:
            super().load_weights(path, skip_mismatch=skip_mismatch, **kwargs)

    def _bijectors(self) -> list:
        """The flow's bijectors, data side first (TFP's `Chain` order)."""
        raise NotImplementedError

    def _base(self, y) -> tfd.Distribution:
        return standard_normal(self.event_size, self.compute_dtype, y)

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
        aligned = contextlib.nullcontext()
        if y is not None:  # broadcast once here, not again in each network and its gradient
            u, y = broadcast_batch(x, y)
            aligned = rows_aligned()
        with aligned:
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
