"""The paper's evaluation-time batch-norm statistics (its appendix B).

In training each `tfp_maf.ExpGammaBatchNorm` normalises with the minibatch's mean and
variance; at evaluation it uses those of the whole training set, as it reaches that
batch norm: the training data mapped towards the noise, in evaluation mode, through
the bijectors before it. `set_batch_norm_statistics` does that pass;
`BatchNormStatistics` runs it before each validation and at the end of training.
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from tfp_maf import BatchNormState, ExpGammaBatchNorm, flow_kwargs
from tfp_maf._tracking import sublayers

__all__ = ["BatchNormStatistics", "batch_norm_layers", "set_batch_norm_statistics"]


def batch_norm_layers(model) -> list[BatchNormState]:
    """The layers that hold ``model``'s batch-norm statistics."""
    return [layer for layer in sublayers(model) if isinstance(layer, BatchNormState)]


def set_batch_norm_statistics(model, x, y=None, batch_size: int = 10_000) -> None:
    """Sets every batch norm of ``model`` (a `keras_models.DensityModel`) to the mean and
    variance of what reaches it from the training set ``x`` (and ``y``).

    Args:
      model: a `keras_models.DensityModel`; one without batch norms is left as it is.
      x: the training data ``[N, D]``.
      y: its side information ``[N, K]`` for a conditional model.
      batch_size: rows per pass through the flow.

    See `keras_models.DensityModel.set_batch_norm_statistics` for an example.
    """
    layers = {layer.name: layer for layer in batch_norm_layers(model)}
    if not layers:
        return
    x = np.asarray(x)
    dist = model.distribution(None if y is None else y[:1])
    chunks = range(0, len(x), batch_size)
    current = [tf.cast(x[i : i + batch_size], model.compute_dtype) for i in chunks]
    ys = [None if y is None else tf.cast(y[i : i + batch_size], model.compute_dtype) for i in chunks]
    bijectors = list(dist.bijector.bijectors)  # data side first
    last_norm = max(i for i, b in enumerate(bijectors) if isinstance(b, ExpGammaBatchNorm))
    # Nothing past the last batch norm needs the training data mapped through it.
    step = _inverse_step(model, last_norm)
    for index, b in enumerate(bijectors[: last_norm + 1]):
        if isinstance(b, ExpGammaBatchNorm):
            values = np.concatenate([c.numpy() for c in current]).astype(np.float64)
            layers[b.name].set_statistics(values.mean(0), values.var(0))
            if index == last_norm:
                return
        current = [step(c, yy, tf.constant(index)) for c, yy in zip(current, ys, strict=True)]


def _inverse_step(model, last: int):
    """``step(x, y, index)``: the inverse of the ``index``-th bijector of the chain
    (``index < last``), as ONE cached graph function that switches on ``index``: it
    reads the layers' variables when it runs, so statistics set in between are seen,
    and it is traced once for all the bijectors (one function per bijector would be
    a dozen traces, each a retracing warning from TF)."""

    def step(c, yy, index):
        dist = model.distribution(None if yy is None else yy[:1])

        def inverse(b):
            return lambda: b.inverse(c, **flow_kwargs(b, conditional_input=yy))

        return tf.switch_case(index, [inverse(b) for b in dist.bijector.bijectors[:last]])

    # y, when given, is always [N, K]: one function whatever it is.
    return model._traced(f"inverse step to {last}", None, step)


class BatchNormStatistics(keras.callbacks.Callback):
    """Sets batch-norm statistics from the whole training set before each
    validation and at the end of training (appendix B of the paper).

    `keras_models.training.fit_as_paper` adds it last, so that it runs after early
    stopping has restored the best weights.

    Args:
      x_train: the whole training set ``[N, D]``.
      y_train: its side information ``[N, K]`` for a conditional model.

    Example:

    >>> import keras, numpy as np
    >>> from keras_models import MAF
    >>> x = np.random.default_rng(0).normal(3.0, 2.0, (64, 2)).astype(np.float32)
    >>> model = MAF(2, num_layers=1, hidden_units=[8])
    >>> model.compile(optimizer=keras.optimizers.Adam(1e-3))
    >>> _ = model.fit(x, epochs=1, callbacks=[BatchNormStatistics(x)], verbose=0)

    The batch norm's mean is that of the training data mapped through the MADE
    before it:

    >>> import tfp_maf
    >>> u = tfp_maf.MaskedAutoregressive(model.mades[0]).inverse(x).numpy()
    >>> bool(np.allclose(model.norms[0].mean.numpy(), u.mean(0), atol=1e-4))
    True
    """

    def __init__(self, x_train, y_train=None):
        super().__init__()
        self.x_train, self.y_train = x_train, y_train

    def _update(self):
        set_batch_norm_statistics(self.model, self.x_train, self.y_train)

    def on_test_begin(self, logs=None):
        self._update()

    def on_train_end(self, logs=None):
        # Runs after EarlyStopping restored the best weights (callbacks run in order).
        self._update()
