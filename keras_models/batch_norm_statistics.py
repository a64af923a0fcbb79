"""The paper's evaluation-time batch-norm statistics (its appendix B).

In training each `tfp_maf.ExpGammaBatchNorm` normalises with the minibatch's mean and
variance; at evaluation it uses those of the whole training set, as it reaches that
batch norm: the training data mapped towards the noise, in evaluation mode, through
the bijectors before it. `set_batch_norm_statistics` does that pass;
`BatchNormStatistics` runs it before each validation and at the end of training.

Without it, `EpochStatistics`, which every `keras_models.DensityModel.fit` adds, stores
in each batch norm the mean and variance of the rows it normalised in the epoch, the
later batches weighted more: near the pass's figures, as far as the weights change
within the epoch, at no cost of a pass.
"""

from __future__ import annotations

import contextlib
import weakref

import keras
import numpy as np
import tensorflow as tf

from keras_models import _checks
from keras_models.model_functions import (
    has_model_function,
    model_function,
    rows_per_call,
    traced_log_prob,
)
from keras_models.streamed_rows import MappedRows, Moments
from tfp_maf import BatchNormState, ExpGammaBatchNorm, flow_kwargs
from tfp_maf.bijectors import FusedBijector
from tfp_maf.layers import kernels_as_stored, sublayers

__all__ = ["BatchNormStatistics", "EpochStatistics", "ValidationWithStatistics", "batch_norm_layers",
           "set_batch_norm_statistics", "store_epoch_moments", "validation_loss_with_statistics"]

#: `EpochStatistics` weighs a minibatch by ``e`` less over each such fraction of the
#: epoch after it ...
WINDOW_FRACTION = 0.25
#: ... or over this many minibatches where that is more (and in an epoch of unknown length).
MIN_WINDOW = 25


def batch_norm_layers(model) -> list[BatchNormState]:
    """The layers that hold ``model``'s batch-norm statistics."""
    return [layer for layer in sublayers(model) if isinstance(layer, BatchNormState)]


# A model's layers are set when it is built: found once (a walk of every attribute of
# every layer costs a millisecond, at every validation).
_LAYERS = weakref.WeakKeyDictionary()


def _named_batch_norm_layers(model) -> dict:
    if model not in _LAYERS:
        _LAYERS[model] = {layer.name: layer for layer in batch_norm_layers(model)}
    return _LAYERS[model]


def set_batch_norm_statistics(model, x, y=None, batch_size: int | None = None) -> None:
    """Sets every batch norm of ``model`` (a `keras_models.DensityModel`) to the mean and
    variance of what reaches it from the training set ``x`` (and ``y``).

    Each batch norm's statistics depend on those before it (they shape what reaches
    it), so the batch norms are set in order, one streaming pass over the rows each:
    every row goes through each bijector once, and each pass sums its batches' moments
    in float64 (Chan et al.'s pairwise update, the same figures as two passes over
    the whole set, to float64 rounding). Memory does not grow with the training set:
    the rows, mapped as far as the last pass took them, wait in a temporary file
    between passes (in memory, below `keras_models.streamed_rows.IN_MEMORY_BYTES`).

    Args:
      model: a `keras_models.DensityModel`; one without batch norms is left as it is.
      x: the training data ``[N, D]``.
      y: its side information ``[N, K]`` for a conditional model.
      batch_size: rows per call through the flow; None:
        `keras_models.model_functions.rows_per_call` (a call's temporary memory grows
        with its rows, and its speed not beyond that size).

    See `keras_models.DensityModel.set_batch_norm_statistics` for an example.
    """
    _set_statistics(model, x, y, batch_size)


def validation_loss_with_statistics(model, x, y, x_val, y_val=None) -> float:
    """`set_batch_norm_statistics` from the training set ``x`` (and ``y``), then the mean
    negative log-likelihood of the validation rows ``x_val`` (and ``y_val``) with the
    statistics set: what a validation of the paper's recipe computes.

    Where the training set takes one call through the flow, the statistics and the
    validation are one call of one traced function: on a small dataset a validation by
    Keras (its own traced function, a new iterator and its loop each epoch) costs
    about as much as the epoch's pass for the statistics.

    Args:
      model: a `keras_models.DensityModel`.
      x: the training data ``[N, D]``.
      y: its side information ``[N, K]``; None for an unconditional model.
      x_val: the validation rows ``[M, D]``.
      y_val: their side information ``[M, K]``; None for an unconditional model.

    Returns:
      The validation loss, a float (as ``evaluate`` gives it).

    Example:

    >>> import numpy as np
    >>> from keras_models import MAF
    >>> rng = np.random.default_rng(0)
    >>> x, x_val = rng.normal(size=(64, 2)).astype(np.float32), rng.normal(size=(16, 2)).astype(np.float32)
    >>> model = MAF(2, num_layers=1, hidden_units=[8])
    >>> loss = validation_loss_with_statistics(model, x, None, x_val)
    >>> bool(np.isclose(loss, -model.log_prob(x_val).numpy().mean()))
    True
    """
    x_val, y_val = _checks.check_x(model, x_val), _checks.check_y(model, y_val, "pass y_val")
    # One call takes rows [M, D] (and [M, K]); other shapes go through log_prob.
    rows = x_val.shape.rank == 2 and (y_val is None or y_val.shape[:-1] == x_val.shape[:-1])
    loss = _set_statistics(model, x, y, None, *((x_val, y_val) if rows else (None, None)))
    return float(-tf.reduce_mean(model.log_prob(x_val, y_val))) if loss is None else loss


def _set_statistics(model, x, y, batch_size, x_val=None, y_val=None):
    """`set_batch_norm_statistics`; for a training set of one call and validation rows,
    the validation loss of that call (`_set_in_one_call`), else None."""
    layers = _named_batch_norm_layers(model)
    if not layers:
        return None
    if model.conditional_dims is not None and y is None:
        raise ValueError(f"{model.name} is conditional on y with {model.conditional_dims} columns: "
                         "call set_batch_norm_statistics(x, y).")
    x = np.asarray(x)
    dtype = model.compute_dtype
    batch_size = batch_size or rows_per_call(int(np.prod(x.shape[1:])))
    starts = range(0, len(x), batch_size)
    if len(starts) == 1:  # a small training set: every batch norm in one call
        return _set_in_one_call(model, layers, x, y, dtype, x_val, y_val)
    dist = model.distribution(None if y is None else y[:1])
    bijectors = list(dist.bijector.bijectors)  # data side first
    norms = [i for i, b in enumerate(bijectors) if isinstance(b, ExpGammaBatchNorm)]
    # Nothing past the last batch norm needs the training data mapped through it.
    step, moments = _inverse_step(model, norms[-1]), _batch_moments(model)
    # With one batch norm, no rows wait between passes.
    keep = (MappedRows(len(x), x.shape[1:], tf.as_dtype(dtype).as_numpy_dtype) if len(norms) > 1
            else contextlib.nullcontext())
    with keep as mapped:
        done = 0  # the bijectors that the rows in `mapped` went through
        for norm in norms:
            total = Moments()
            for start in starts:
                stop = min(start + batch_size, len(x))
                rows = tf.cast(x[start:stop] if done == 0 else mapped.read(start, stop), dtype)
                yy = None if y is None else tf.cast(y[start:stop], dtype)
                for index in range(done, norm):
                    rows = step(rows, yy, tf.constant(index))
                if norm != norms[-1]:
                    mapped.write(start, rows.numpy())
                total.add(stop - start, *moments(rows))
            # Set before the next pass: its rows go through this batch norm.
            layers[bijectors[norm].name].set_statistics(total.mean, total.variance)
            done = norm
    return None


def _inverse_step(model, last: int):
    """``step(x, y, index)``: the inverse of the ``index``-th bijector of the chain
    (``index < last``), as ONE cached graph function that switches on ``index``: it
    reads the layers' variables when it runs, so statistics set in between are seen,
    and it is traced once for all the bijectors (one function per bijector would be
    a dozen traces, each a retracing warning from TF)."""

    def step(c, yy, index):
        dist = model.distribution(None if yy is None else yy[:1])
        context = model.context(yy)  # y, or its embedding (None stays None)

        def inverse(b):
            return lambda: _inverse(b, c, context)

        with kernels_as_stored():  # no gradient: no kernel * mask products
            return tf.switch_case(index, [inverse(b) for b in dist.bijector.bijectors[:last]])

    # y, when given, is always [N, K]: one function whatever it is.
    return model_function(model, f"inverse step to {last}", None, step)


def _set_in_one_call(model, layers: dict, x, y, dtype, x_val=None, y_val=None):
    """The pass of `set_batch_norm_statistics` for a training set of one batch: one call
    of one traced function maps the rows and sets each batch norm before the rows go
    through it (the same figures, bitwise; one call instead of a dozen, whose overhead
    was most of the pass on small data). The function also says whether every statistic
    is one `BatchNormState.set_statistics` accepts; if not, the old ones come back and
    the error is the one `set_statistics` raises.

    With validation rows ``x_val`` (and ``y_val``), the same call gives their mean
    negative log-likelihood with the statistics set (a float; else None). Once a model
    has that function, a pass without validation calls it too (with no validation
    rows): one trace for both."""
    x, y = tf.cast(x, dtype), None if y is None else tf.cast(y, dtype)
    validating = x_val is not None
    if validating or has_model_function(model, _VALIDATED):
        if not validating:
            x_val, y_val = x[:0], None if y is None else y[:0]
        x_val, y_val = tf.cast(x_val, dtype), None if y_val is None else tf.cast(y_val, dtype)
        args = (x, y, x_val, y_val) if y is not None else (x, x_val)
        before, statistics, valid, loss = _validated_pass(model, layers, y is not None)(*args)
    else:
        (before, statistics, valid), loss = _pass(model, layers)(x, y), None
    if bool(valid):
        return float(loss) if validating else None
    for name, (mean, variance) in before.items():
        layers[name].mean.assign(mean)
        layers[name].variance.assign(variance)
    for name, (mean, variance) in statistics.items():
        layers[name].checked_statistics(mean.numpy(), variance.numpy())
    # (set_statistics accepts what the graph refused: the two checks disagree)
    raise ValueError("the training set's batch-norm statistics are non-finite or negative.")


def _statistics_in_graph(model, layers: dict, rows, yy):
    """Sets every batch norm's statistics from ``rows`` in order, in the graph being
    traced, and returns them by layer name (float64 means and variances), their
    values before and whether they are valid. The variables are assigned in the
    graph, and a batch norm's bijector reads them when it runs, after the assignment
    (TensorFlow orders a resource's reads and writes as written)."""
    dist = model.distribution(None if yy is None else yy[:1])
    before, statistics, valid = {}, {}, tf.constant(True)
    context = model.context(yy)
    with kernels_as_stored():  # no gradient: no kernel * mask products
        for bijector in dist.bijector.bijectors:
            if isinstance(bijector, ExpGammaBatchNorm):
                mean, m2 = _moments(rows)
                # The biased variance, as `Moments` gives it for one batch.
                variance = m2 / tf.cast(tf.shape(rows)[0], tf.float64)
                layer = layers[bijector.name]
                before[bijector.name] = (tf.identity(layer.mean), tf.identity(layer.variance))
                mean, variance = tf.cast(mean, layer.mean.dtype), tf.cast(variance, layer.variance.dtype)
                # What `BatchNormState.set_statistics` accepts, in the variables' dtype.
                valid &= tf.reduce_all(tf.math.is_finite(mean)) & tf.reduce_all(tf.math.is_finite(variance))
                valid &= tf.reduce_all(variance >= 0)
                layer.mean.assign(mean)
                layer.variance.assign(variance)
                statistics[bijector.name] = (mean, variance)
                if len(statistics) == len(layers):
                    break  # nothing past the last batch norm needs the rows
            rows = _inverse(bijector, rows, context)
    return before, statistics, valid


def _pass(model, layers: dict):
    """``run(x, y)``: `_statistics_in_graph` as one cached graph function."""
    return model_function(model, "batch-norm statistics in one call", None,
                          lambda rows, yy: _statistics_in_graph(model, layers, rows, yy))


_VALIDATED = "batch-norm statistics and validation in one call"


def _validated_pass(model, layers: dict, conditional: bool):
    """``run(x, y, x_val, y_val)`` (``run(x, x_val)`` for an unconditional model):
    `_statistics_in_graph` from ``x``, then the mean negative log-likelihood of
    ``x_val`` with the statistics set, as one cached graph function traced once for any
    number of rows. The log-likelihood is the model's traced ``log_prob``
    (`keras_models.model_functions.traced_log_prob`), whose trace for rows of any
    number then serves the user's later calls, as a Keras validation's does."""

    def run(*args):
        rows, yy, x_val, y_val = args if conditional else (args[0], None, args[1], None)
        before, statistics, valid = _statistics_in_graph(model, layers, rows, yy)
        return before, statistics, valid, -tf.reduce_mean(traced_log_prob(model, x_val, y_val))

    rows = tf.TensorSpec([None, model.event_size], model.compute_dtype)
    side = tf.TensorSpec([None, model.conditional_dims or 0], model.compute_dtype)
    signature = [rows, side, rows, side] if conditional else [rows, rows]
    return model_function(model, _VALIDATED, None, run, input_signature=signature)


def _inverse(bijector, rows, context):
    """``bijector.inverse(rows)``, by the fused pass where there is one (no cache, fewer
    ops to trace)."""
    kwargs = flow_kwargs(bijector, conditional_input=context)
    if isinstance(bijector, FusedBijector):
        return bijector.inverse_and_log_det(rows, **kwargs)[0]
    return bijector.inverse(rows, **kwargs)


def _moments(rows):
    """The mean and the sum of squared deviations of ``rows``' columns, in float64."""
    rows = tf.cast(rows, tf.float64)
    mean = tf.reduce_mean(rows, axis=0)
    return mean, tf.reduce_sum(tf.math.squared_difference(rows, mean), axis=0)


def _batch_moments(model):
    """`_moments` as one cached graph function of ``model``."""
    return model_function(model, "batch moments", None, _moments)


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
    >>> model = MAF(2, num_layers=1, hidden_units=[8], standardize=False)  # the data reach the MADE as they are
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


class ValidationWithStatistics(keras.callbacks.Callback):
    """At each epoch's end, the batch norms' statistics from the whole training set and
    the validation loss with them (`validation_loss_with_statistics`: one call where the
    training set takes one), given to the callbacks after it as ``logs["val_loss"]``.

    For a ``fit`` without ``validation_data``, ahead of every callback that reads the
    validation loss; `keras_models.training.fit_as_paper` uses it in place of Keras'
    validation where the training set takes one call. The statistics are the weights'
    of each epoch, and go with them (early stopping's best weights carry their own);
    `fit` then adds no `EpochStatistics`.

    Args:
      x_train: the training data ``[N, D]``.
      y_train: its side information ``[N, K]``; None for an unconditional model.
      x_val: the validation rows ``[M, D]``.
      y_val: their side information ``[M, K]``; None for an unconditional model.

    Example:

    >>> import keras, numpy as np
    >>> from keras_models import MAF
    >>> rng = np.random.default_rng(0)
    >>> x, x_val = rng.normal(size=(64, 2)).astype(np.float32), rng.normal(size=(16, 2)).astype(np.float32)
    >>> model = MAF(2, num_layers=1, hidden_units=[8])
    >>> model.compile(optimizer=keras.optimizers.Adam(1e-3))
    >>> history = model.fit(x, epochs=2, verbose=0, callbacks=[ValidationWithStatistics(x, None, x_val)])
    >>> len(history.history["val_loss"])
    2
    """

    def __init__(self, x_train, y_train, x_val, y_val=None):
        super().__init__()
        self.x_train, self.y_train, self.x_val, self.y_val = x_train, y_train, x_val, y_val

    def on_train_begin(self, logs=None):
        # Refused before the first epoch trains, not after it.
        _checks.check_x(self.model, self.x_val)
        _checks.check_y(self.model, self.y_val, "pass y_val")
        if self.model.conditional_dims is not None and self.y_train is None:
            raise ValueError(f"{self.model.name} is conditional on y with {self.model.conditional_dims} "
                             "columns: pass y_train.")

    def on_epoch_end(self, epoch, logs=None):
        loss = validation_loss_with_statistics(self.model, self.x_train, self.y_train, self.x_val, self.y_val)
        if logs is not None:
            logs["val_loss"] = loss


_STORE = "store the batch norms' epoch moments"


def store_epoch_moments(model) -> None:
    """Every batch norm's `tfp_maf.BatchNormState.store_epoch_moments`, in one call of a
    traced function kept on ``model``: each layer's reads and writes, eagerly, cost about
    0.5 ms (2 cores), and `EpochStatistics` stores twice an epoch, ``train_on_batch``
    once a call."""
    # The layers are found once, when the function is made (the walk costs 2 ms).
    layers = None if has_model_function(model, _STORE) else batch_norm_layers(model)
    model_function(model, _STORE, None, lambda: [layer.store_epoch_moments() for layer in layers])()


class EpochStatistics(keras.callbacks.Callback):
    """Each epoch, every batch norm's stored statistics become the mean and variance
    of the rows it normalised in that epoch (`tfp_maf.BatchNormState.store_epoch_moments`):
    before validation and when the epoch ends, ahead of every other callback, so that
    early stopping, checkpoints and backups keep them with the weights.

    The later minibatches weigh more: a minibatch's weight falls by a factor ``e``
    over each `WINDOW_FRACTION` of the epoch after it (at least `MIN_WINDOW`
    minibatches; all of them alike in an epoch that short), or over fewer minibatches
    (at least one) where fewer hold `tfp_maf.layers.batch_norm.ROWS_PER_DIMENSION` rows
    a dimension. The bijectors before a batch norm change as they train, and the
    statistics are for the weights at the epoch's end: weighted alike, the rows of a
    5-epoch Real NVP on data far from 0 put its densities 0.5 nats from the exact pass;
    weighted so, 0.06.

    `keras_models.DensityModel.fit` puts it first in its callbacks, unless they hold a
    `BatchNormStatistics` (the paper's exact pass, which `fit_as_paper` uses): a plain
    ``fit``, with any input form or under `tf.distribute`, leaves a model whose
    densities are right, as Keras' own batch normalization does with its moving
    statistics.

    Example:

    >>> import keras, numpy as np
    >>> from keras_models import MAF
    >>> x = np.random.default_rng(0).normal(3.0, 2.0, (64, 2)).astype(np.float32)
    >>> model = MAF(2, num_layers=1, hidden_units=[8], standardize=False)  # the data reach the MADE as they are
    >>> model.compile(optimizer=keras.optimizers.Adam(1e-3))
    >>> _ = model.fit(x, epochs=1, batch_size=64, verbose=0)  # adds the callback

    The first batch norm stores the moments of what it normalised, the data through the
    MADE before it (one batch here; one step of training later, the MADE has barely moved):

    >>> import tfp_maf
    >>> u = tfp_maf.MaskedAutoregressive(model.mades[0]).inverse(x).numpy()
    >>> bool(np.allclose(model.norms[0].mean.numpy(), u.mean(0), atol=0.05))
    True
    """

    def __init__(self):
        super().__init__()
        self._steps = None  # of the last epoch, when Keras does not know them

    def _layers(self):
        return _named_batch_norm_layers(self.model).values()

    def on_epoch_begin(self, epoch, logs=None):
        steps = (self.params or {}).get("steps") or self._steps
        window = MIN_WINDOW if steps is None else max(steps * WINDOW_FRACTION, min(steps, MIN_WINDOW))
        for layer in self._layers():
            layer.reset_epoch_moments(window)
        self._first_step = self._iterations()

    def _iterations(self):
        optimizer = getattr(self.model, "optimizer", None)
        return None if optimizer is None else int(optimizer.iterations.numpy())

    def _store(self):
        store_epoch_moments(self.model)

    def on_test_begin(self, logs=None):
        self._store()  # validation within fit: this epoch's rows so far

    def on_epoch_end(self, epoch, logs=None):
        self._store()
        if self._first_step is not None:
            self._steps = (self._iterations() - self._first_step) or None
