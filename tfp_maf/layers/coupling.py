"""The two feedforward networks of a Real NVP coupling layer, as a Keras 3 layer."""

from __future__ import annotations

from collections.abc import Sequence

import keras
import tensorflow as tf

from tfp_maf import _checks
from tfp_maf.arguments import check_int, check_ints
from tfp_maf.layers._seeds import seeded
from tfp_maf.math import broadcast_batch, rows_are_aligned

__all__ = ["CouplingNetworks"]


@keras.saving.register_keras_serializable(package="tfp_maf")
class CouplingNetworks(keras.layers.Layer):
    """Scale and shift networks of the paper's coupling layer.

    ``alpha = f_alpha(x_c, y)`` has tanh hidden units and ``mu = f_mu(x_c, y)``
    relu hidden units; both have ``L`` hidden layers of the same sizes and a
    linear output. ``y`` (if any) is concatenated to the copied variables.
    Both output layers start at zero, so the coupling starts as the identity.

    Calling the layer returns ``(shift, log_scale)``, each ``[..., num_transformed]``.

    Args:
      num_copied: width of ``x_c``.
      num_transformed: width of ``x_t``.
      hidden_units: hidden layer sizes of each network (the same for both).
      conditional_dims: width of ``y``, or ``None``.
      kernel_regularizer: applied to every kernel, e.g. ``keras.regularizers.L2(1e-6)``.
      seed: seed of the hidden kernels' initial values (each its own stream): the
        same seed gives the same networks. None: random, from Keras' global seed.
      **kwargs: Keras' layer arguments (``name``, ``dtype``, ...).

    Attributes:
      scale_net: the layers of ``f_alpha`` (tanh hidden, linear output), a list of
        `keras.layers.Dense`.
      shift_net: the layers of ``f_mu`` (relu hidden, linear output).

    Call arguments:
      x_copied: ``batch + [num_copied]``.
      conditional_input: ``y``, ``batch + [conditional_dims]`` (broadcast against
        ``x_copied``'s batch); required when ``conditional_dims`` is set, refused
        otherwise.

    Raises:
      ValueError: at call time, if the last axis of ``x_copied`` is not
        ``num_copied``, or ``y`` is missing, unexpected or of the wrong width.

    Example:

    >>> import numpy as np
    >>> nets = CouplingNetworks(num_copied=2, num_transformed=3, hidden_units=[8])
    >>> [t.shape for t in nets(np.zeros((4, 2), np.float32))]
    [TensorShape([4, 3]), TensorShape([4, 3])]

    Conditional on ``y`` of width 5, one row of ``y`` for the whole batch:

    >>> nets = CouplingNetworks(2, 3, hidden_units=[8], conditional_dims=5)
    >>> shift, log_scale = nets(np.zeros((4, 2), np.float32),
    ...                         conditional_input=np.ones(5, np.float32))
    >>> shift.shape, bool(np.all(log_scale.numpy() == 0))  # the output layers start at zero
    (TensorShape([4, 3]), True)
    """

    def __init__(
        self,
        num_copied: int,
        num_transformed: int,
        hidden_units: Sequence[int] = (64, 64),
        conditional_dims: int | None = None,
        kernel_regularizer=None,
        seed: int | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.seed = seed
        self.num_copied = check_int(num_copied, "num_copied")
        self.num_transformed = check_int(num_transformed, "num_transformed")
        self.hidden_units = check_ints(hidden_units, "hidden_units")
        self.conditional_dims = check_int(conditional_dims, "conditional_dims", optional=True)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        width = self.num_copied + (self.conditional_dims or 0)
        self.scale_net = self._network("tanh", width, "scale", stream=0)
        self.shift_net = self._network("relu", width, "shift", stream=100)
        self.built = True

    def _network(self, activation, width, prefix, stream):
        layers = []
        for i, units in enumerate(self.hidden_units):
            layer = keras.layers.Dense(
                units,
                activation=activation,
                kernel_initializer=seeded("glorot_uniform", self.seed, stream + i),
                kernel_regularizer=self.kernel_regularizer,
                dtype=self.dtype_policy,
                name=f"{prefix}_hidden_{i}",
            )
            layer.build((None, width))
            layers.append(layer)
            width = units
        out = keras.layers.Dense(
            self.num_transformed,
            kernel_initializer="zeros",
            kernel_regularizer=self.kernel_regularizer,
            dtype=self.dtype_policy,
            name=f"{prefix}_output",
        )
        out.build((None, width))
        layers.append(out)
        return layers

    def call(self, x_copied, conditional_input=None):
        x_copied = tf.convert_to_tensor(x_copied, dtype=self.compute_dtype)
        _checks.check_event_size(x_copied, self.num_copied, "CouplingNetworks")
        _checks.check_conditional_input(
            conditional_input, self.conditional_dims, "CouplingNetworks"
        )
        h = x_copied
        if conditional_input is not None:
            y = tf.cast(conditional_input, self.compute_dtype)
            h = tf.concat([h, y] if rows_are_aligned() else broadcast_batch(h, y), axis=-1)
        batch = tf.shape(h)[:-1]
        # Dense layers want a matrix: flatten the batch, restore it at the end.
        h = tf.reshape(h, [-1, self.num_copied + (self.conditional_dims or 0)])
        log_scale, shift = h, h
        for layer in self.scale_net:
            log_scale = layer(log_scale)
        for layer in self.shift_net:
            shift = layer(shift)
        out_shape = tf.concat([batch, [self.num_transformed]], 0)
        return tf.reshape(shift, out_shape), tf.reshape(log_scale, out_shape)

    def get_config(self):
        config = super().get_config()
        config.update(
            num_copied=self.num_copied,
            num_transformed=self.num_transformed,
            hidden_units=self.hidden_units,
            conditional_dims=self.conditional_dims,
            kernel_regularizer=keras.regularizers.serialize(self.kernel_regularizer),
            seed=self.seed,
        )
        return config
