"""The weights of the paper's batch norm, as a Keras 3 layer."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from tfp_maf import _checks
from tfp_maf.bijectors.exp_gamma_batch_norm import ExpGammaBatchNorm

__all__ = ["BatchNormState"]


@keras.saving.register_keras_serializable(package="tfp_maf")
class BatchNormState(keras.layers.Layer):
    """Holds ``beta``, ``gamma`` (trained) and ``mean``, ``variance`` (set).

    The maths is `tfp_maf.bijectors.ExpGammaBatchNorm`, which `bijector()`
    returns bound to this layer's variables. ``beta`` and ``gamma`` start at
    zero (the identity, up to the normalisation). ``mean`` and ``variance``
    are not trained: the paper sets them to the statistics of the whole
    training set, which `set_statistics` does explicitly (the owning model
    calls it before each validation and at the end of training). They are
    saved with the layer.

    Calling the layer maps data to noise (the bijector's inverse), with the
    minibatch's statistics when ``training=True``.

    Args:
      event_size: ``D``.
      epsilon: the paper's ``eps = 1e-5``.
      **kwargs: Keras' layer arguments (``name``, ``dtype``, ...). The name is
        the default name of `bijector()`, which must be unique in a chain.

    Raises:
      ValueError: at call time, if the last axis of the input is not ``D``.

    Example:

    >>> import numpy as np
    >>> bn = BatchNormState(2)
    >>> bn.set_statistics(mean=[1., 2.], variance=[4., 9.])
    >>> np.round(bn(np.array([[3., 5.]], np.float32)).numpy(), 3)
    array([[1., 1.]], dtype=float32)
    >>> [w.name for w in bn.trainable_weights], [w.name for w in bn.non_trainable_weights]
    (['beta', 'gamma'], ['mean', 'variance'])
    """

    def __init__(self, event_size: int, epsilon: float = 1e-5, **kwargs):
        super().__init__(**kwargs)
        self.event_size = int(event_size)
        self.epsilon = float(epsilon)
        D = self.event_size
        self.beta = self.add_weight(name="beta", shape=(D,), initializer="zeros")
        self.gamma = self.add_weight(name="gamma", shape=(D,), initializer="zeros")
        self.mean = self.add_weight(
            name="mean", shape=(D,), initializer="zeros", trainable=False
        )
        self.variance = self.add_weight(
            name="variance", shape=(D,), initializer="ones", trainable=False
        )
        self.built = True

    def bijector(self, name: str | None = None) -> ExpGammaBatchNorm:
        """The batch norm as a bijector that reads this layer's variables at every call.

        Args:
          name: the bijector's name; None (the default) uses the layer's name.

        Returns:
          A `tfp_maf.bijectors.ExpGammaBatchNorm` over ``beta``, ``gamma``,
          ``mean`` and ``variance``: training the layer, or setting its
          statistics, changes what the bijector computes.

        Example:

        >>> import numpy as np
        >>> bn = BatchNormState(2, name="norm_0")
        >>> b = bn.bijector()
        >>> b.name
        'norm_0'
        >>> bn.set_statistics(mean=[1., 2.], variance=[4., 9.])
        >>> np.round(b.inverse(np.array([[3., 5.]], np.float32)).numpy(), 3)
        array([[1., 1.]], dtype=float32)
        """
        return ExpGammaBatchNorm(
            self.beta.value,
            self.gamma.value,
            self.mean.value,
            self.variance.value,
            epsilon=self.epsilon,
            name=name or self.name,
        )

    def set_statistics(self, mean, variance) -> None:
        """Sets the evaluation-time statistics (the training set's, in the paper).

        Args:
          mean: ``[D]`` (array-like).
          variance: ``[D]``, at least 0.

        Raises:
          ValueError: if either is not of shape ``[D]`` or has non-finite values,
            or a variance is negative.
        """
        mean, variance = self._checked_statistics(mean, variance)
        self.mean.assign(mean)
        self.variance.assign(variance)

    def _checked_statistics(self, mean, variance):
        """``(mean, variance)`` as arrays of the variables' dtype, or the ValueError
        `set_statistics` documents."""
        mean = np.asarray(mean, dtype=self.variable_dtype)
        variance = np.asarray(variance, dtype=self.variable_dtype)
        for what, value in (("mean", mean), ("variance", variance)):
            if value.shape != (self.event_size,):
                raise ValueError(
                    f"{self.name}: expected a {what} of shape ({self.event_size},), "
                    f"got {value.shape}."
                )
            if not np.all(np.isfinite(value)):
                raise ValueError(f"{self.name}: the {what} has non-finite values: {value}.")
        if np.any(variance < 0):
            raise ValueError(f"{self.name}: variances must be >= 0, got {variance}.")
        return mean, variance

    def call(self, x, training=False):
        x = tf.convert_to_tensor(x, dtype=self.compute_dtype)
        _checks.check_event_size(x, self.event_size, self.name)
        return self.bijector().inverse(x, training=bool(training))

    def get_config(self):
        config = super().get_config()
        config.update(event_size=self.event_size, epsilon=self.epsilon)
        return config
