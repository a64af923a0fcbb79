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
    variance of what reaches it from the training set ``x`` (and ``y``)."""
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
    validation and at the end of training (appendix B of the paper)."""

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
