"""The weights of the paper's batch norm, as a Keras 3 layer."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from tfp_maf import _checks
from tfp_maf.arguments import check_bound, check_int
from tfp_maf.bijectors.exp_gamma_batch_norm import ExpGammaBatchNorm

__all__ = ["BatchNormState"]

#: The rows a dimension that a batch norm's weighted epoch moments need
#: (`BatchNormState.reset_epoch_moments`): their noise costs about ``D / rows`` nats, 0.01
#: with these, while every row more is older. The bijectors before a batch norm move at each
#: step, under Adam by about its step size even along the mean of the batch norm's input,
#: which training leaves free (the batch norm removes it). Ten plain fits of a conditional
#: MAF (5) on two moons (D 2, 4,000 to 9,000 rows, batch 100 or 200, 10 to 30 epochs, 2 x 32
#: or 2 x 50 tanh units): the held-out log-density with the stored statistics was 0.17 nats
#: a row from the paper's pass on average and 0.79 at worst with the moments weighted over
#: 25 minibatches (the epoch's rule alone); over these rows, 0.07 and 0.15 (with 500 rows a
#: dimension, 0.08 on average).
ROWS_PER_DIMENSION = 100


@keras.saving.register_keras_serializable(package="tfp_maf")
class BatchNormState(keras.layers.Layer):
    """Holds ``beta``, ``gamma`` (trained) and ``mean``, ``variance`` (set).

    The maths is `tfp_maf.bijectors.ExpGammaBatchNorm`, which `bijector()`
    returns bound to this layer's variables. ``beta`` and ``gamma`` start at
    zero (the identity, up to the normalisation). ``mean`` and ``variance``
    are not trained: the paper sets them to the statistics of the whole
    training set, which `set_statistics` does explicitly. They are saved with
    the layer.

    Every minibatch the layer normalises in training (``training=True``) is
    also summed into its *epoch moments*: the mean and variance of the rows it
    normalised since `reset_epoch_moments` (every row alike, or the latest
    weighted more), which `store_epoch_moments` makes the stored statistics. A
    `keras_models.DensityModel`'s ``fit`` does both each epoch, so the
    statistics follow the training data with no pass of their own (unless the
    paper's pass sets them: then its step keeps no moments, ``bijector(keep_epoch_moments=False)``).
    The sums are not weights: they are neither trained nor saved.

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
        self.event_size = check_int(event_size, "event_size")
        self.epsilon = check_bound(epsilon, "epsilon", optional=False)
        D = self.event_size
        self.beta = self.add_weight(name="beta", shape=(D,), initializer="zeros")
        self.gamma = self.add_weight(name="gamma", shape=(D,), initializer="zeros")
        self.mean = self.add_weight(
            name="mean", shape=(D,), initializer="zeros", trainable=False
        )
        self.variance = self.add_weight(
            name="variance", shape=(D,), initializer="ones", trainable=False
        )
        self._epoch = _EpochMoments(D, self.variable_dtype)
        self.built = True

    def bijector(self, name: str | None = None, keep_epoch_moments: bool = True) -> ExpGammaBatchNorm:
        """The batch norm as a bijector that reads this layer's variables at every call.

        Args:
          name: the bijector's name; None (the default) uses the layer's name.
          keep_epoch_moments: whether the minibatches it normalises in training are
            summed into the layer's epoch moments. False for a loop that sets the
            statistics otherwise: `keras_models.DensityModel`'s ``fit`` traces its step
            so when the paper's pass over the training set sets them
            (`keras_models.BatchNormStatistics`). The moments cost about 20 ops per batch
            norm a step, 5% of a small MAF (5)'s step and 0.07 s of its first trace (2 cores).

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

        A loop that sets the statistics otherwise keeps no moments:

        >>> quiet = bn.bijector(keep_epoch_moments=False)
        >>> _ = quiet.inverse(np.array([[0., 1.], [2., 5.]], np.float32), training=True)
        >>> bool(bn.store_epoch_moments())  # nothing was kept
        False
        """
        return ExpGammaBatchNorm(
            self.beta.value,
            self.gamma.value,
            self.mean.value,
            self.variance.value,
            epsilon=self.epsilon,
            on_batch_moments=self._epoch.add if keep_epoch_moments else None,
            name=name or self.name,
        )

    def reset_epoch_moments(self, window: float | None = None) -> None:
        """Forgets the rows normalised in training so far (an epoch starts).

        Args:
          window: None (the default): every minibatch from now on counts alike.
            Else a minibatch's weight falls by a factor ``e`` over each ``window``
            minibatches that follow it, so that the moments follow the bijectors
            before this batch norm as they train (an exponentially weighted
            mean and variance; a ``window`` of ``w`` weighs about the last ``w``
            minibatches), or over fewer minibatches (at least one), where fewer
            hold `ROWS_PER_DIMENSION` rows for each of the ``D`` dimensions.

        Raises:
          ValueError: if ``window`` is not positive.
        """
        if window is not None and not window > 0:
            raise ValueError(f"{self.name}: window must be None or > 0 minibatches, got {window!r}.")
        self._epoch.reset(np.inf if window is None else float(window))

    def store_epoch_moments(self) -> tf.Tensor:
        """Sets ``mean`` and ``variance`` to those of the rows normalised in
        training since `reset_epoch_moments` (or since the layer was made),
        weighted as `reset_epoch_moments` says. TF ops alone: it runs eagerly or
        in a `tf.function` (one call can store every batch norm of a model).

        Returns:
          A boolean scalar tensor: True if they were set; False, leaving them as
          they were, if no row was normalised or the moments are not finite (a
          diverged step).

        Example:

        >>> import numpy as np
        >>> bn = BatchNormState(1)
        >>> for batch in ([[0.], [2.]], [[4.], [6.]]):
        ...     _ = bn(np.array(batch, np.float32), training=True)
        >>> bool(bn.store_epoch_moments())
        True
        >>> float(bn.mean.numpy()[0]), float(bn.variance.numpy()[0])  # of 0, 2, 4, 6
        (3.0, 5.0)
        """
        rows, mean, variance = self._epoch.result()
        valid = (rows > 0) & tf.reduce_all(tf.math.is_finite(mean)) & tf.reduce_all(tf.math.is_finite(variance))
        self.mean.assign(tf.where(valid, mean, self.mean.value))
        self.variance.assign(tf.where(valid, tf.maximum(variance, 0), self.variance.value))
        return valid

    def set_statistics(self, mean, variance) -> None:
        """Sets the evaluation-time statistics (the training set's, in the paper).

        Args:
          mean: ``[D]`` (array-like).
          variance: ``[D]``, at least 0.

        Raises:
          ValueError: if either is not of shape ``[D]`` or has non-finite values,
            or a variance is negative.
        """
        mean, variance = self.checked_statistics(mean, variance)
        self.mean.assign(mean)
        self.variance.assign(variance)

    def checked_statistics(self, mean, variance):
        """``(mean, variance)`` as arrays of the variables' dtype, or the ValueError
        `set_statistics` documents; nothing is assigned."""
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


class _EpochMoments:
    """The row count, mean and sum of squared deviations of the minibatches a batch
    norm normalised, merged batch by batch in the graph (Chan, Golub and LeVeque's
    pairwise update, stable where the variance is small against the mean), the
    earlier rows weighted by ``decay`` at each minibatch (West's weighted update;
    ``rows`` is then the sum of the weights).

    A plain object, so that neither Keras nor TensorFlow's checkpoints track its
    variables: they are not weights of the layer, nor saved. Under `tf.distribute`
    they sync on read and keep the first replica's: every replica sees the moments
    of the global batch (`tfp_maf.bijectors.batch_moments`), so each adds the same
    figures, with no communication of its own.
    """

    def __init__(self, size: int, dtype):
        def variable(name, initial):
            return tf.Variable(
                initial, trainable=False, name=name,
                synchronization=tf.VariableSynchronization.ON_READ,
                aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
            )

        self.rows, self.mean = variable("rows", tf.zeros([], dtype)), variable("mean", tf.zeros([size], dtype))
        self.m2 = variable("m2", tf.zeros([size], dtype))
        # A minibatch's weight falls by e over each `window` minibatches after it (inf: never),
        # or over fewer, where those hold more than ROWS_PER_DIMENSION rows a dimension.
        self.window = variable("window", tf.constant(np.inf, dtype))
        self._enough_rows = float(ROWS_PER_DIMENSION * size)

    def add(self, rows, mean, variance):
        """Merges one minibatch: its row count, mean and (biased) variance."""
        window = self.window.read_value()
        capped = tf.minimum(window, tf.maximum(tf.ones_like(rows), self._enough_rows / rows))
        decay = tf.exp(-1.0 / tf.where(tf.math.is_inf(window), window, capped))  # inf: 1, every row alike
        before = self.rows.read_value() * decay
        total = before + rows
        delta = mean - self.mean.read_value()
        self.m2.assign(self.m2.read_value() * decay + variance * rows
                       + tf.square(delta) * tf.math.divide_no_nan(before * rows, total))
        self.mean.assign_add(delta * tf.math.divide_no_nan(rows, total))
        self.rows.assign(total)

    def reset(self, window: float = np.inf):
        for variable in (self.rows, self.mean, self.m2):
            variable.assign(tf.zeros_like(variable))
        self.window.assign(tf.constant(window, self.window.dtype))

    def result(self):
        """``(rows, mean, variance)`` as tensors, the variance biased (``m2`` where no
        row came)."""
        rows, m2 = self.rows.read_value(), self.m2.read_value()
        return rows, self.mean.read_value(), tf.where(rows > 0, m2 / rows, m2)
