"""Keras' ``fit``, ``evaluate`` and ``predict`` for a density model: its steps, and the
checks and callbacks around them.

`KerasLoop` is a base of `keras_models.DensityModel`: the loss is the model's own mean
negative log-likelihood (no ``loss`` is compiled) plus ``model.losses``, a train step
masks the MADEs' gradients after the tape (`tfp_maf.layers.kernels_as_stored`) and adds
the gradients of Keras' L2 penalties itself (``2 l2 w``: the same step, fewer ops to
trace), and ``fit`` keeps the batch norms' statistics right
(`keras_models.batch_norm_statistics.EpochStatistics`; with the paper's pass instead,
its step keeps no epoch moments).
The model supplies ``log_prob`` and ``_traced_log_prob``.
"""

from __future__ import annotations

import contextlib
import copy
import math
import warnings

import keras
import numpy as np
import tensorflow as tf

from keras_models import _checks
from keras_models._checks import unpack
from keras_models.batch_norm_statistics import (
    MIN_WINDOW,
    BatchNormStatistics,
    EpochStatistics,
    ValidationWithStatistics,
    batch_norm_layers,
    store_epoch_moments,
)
from keras_models.callbacks import StopOnNonFinite
from keras_models.optimizers import FusedAdam
from keras_models.training_data import check_training_data
from tfp_maf._platform.keras_steps import one_step_function
from tfp_maf.layers import hold_kernel_masks, kernels_as_stored, mask_gradients
from tfp_maf.layers.gradient_masks import KernelMask
from tfp_maf.tracing import custom_gradients_released, mark_traced_on_purpose

__all__ = ["KerasLoop", "NonFiniteGuard", "NonFiniteLossWarning", "with_epoch_statistics", "with_nonfinite_guard"]


class KerasLoop(keras.Model):
    """Keras' training loop of a density model (see the module docstring)."""

    def fit(self, *args, **kwargs):
        """Keras' ``fit``, with the batch norms' statistics kept right.

        Each epoch every batch norm stores the mean and variance of the rows it
        normalised, the later batches weighted more, before validation and at the
        epoch's end (`keras_models.batch_norm_statistics.EpochStatistics`, put first in
        ``callbacks``), so `log_prob` and ``evaluate`` after ``fit`` see statistics of
        the training data. With a `BatchNormStatistics` or `ValidationWithStatistics`
        callback among ``callbacks`` (as `keras_models.training.fit_as_paper` passes)
        the statistics are instead the paper's: a pass over the whole training set,
        and the step keeps no epoch moments.
        Arguments are Keras'.
        """
        kwargs = _checks.dataset_shuffle(super().fit, args, kwargs)
        # By name from here: the callbacks may come positionally.
        kwargs = _checks.by_name(super().fit, args, kwargs)
        kwargs["callbacks"] = with_epoch_statistics(self, kwargs.get("callbacks"))
        kwargs = _checks.weights_kept(self, kwargs)
        _check_training_rows(self, kwargs)
        _checks.check_compiled(self)
        _checks.check_optimizer(self)
        # The data at the door: refused with the reason before a step can ruin the weights,
        # and the flows' standardisation statistics from the same pass (the first fit).
        _checks.check_data(self, super().fit, (), kwargs)
        self._prepare_for_training(check_training_data(self, kwargs, stream=self._needs_statistics))
        kwargs["callbacks"] = with_nonfinite_guard(self, kwargs["callbacks"])
        # The steps keep the batch norms' epoch moments only for `EpochStatistics`: the
        # paper's pass sets the statistics without them (`make_train_function`).
        self._keeps_epoch_moments = _uses_epoch_statistics(kwargs["callbacks"])
        _nonfinite_step(self).assign(-1)
        try:
            return self._checked_call(super().fit, (), kwargs, ("steps_per_epoch", "validation_steps"))
        finally:
            self._keeps_epoch_moments = True
            self.__dict__["_moments_by_batch"] = False  # fit's epochs reset the moments

    def evaluate(self, *args, **kwargs):
        kwargs = _checks.weights_kept(self, _checks.by_name(super().evaluate, args, kwargs))
        _checks.check_compiled(self)
        return self._checked_call(super().evaluate, (), kwargs, ("steps",))

    def predict(self, *args, **kwargs):
        given = _checks.by_name(super().predict, args, kwargs)
        x = _rows_input(given.get("x"))
        if hasattr(x, "shape") and len(x.shape) > 1 and x.shape[0] == 0:  # Keras fails on no rows
            _checks.check_data(self, super().predict, (), given)
            return np.zeros(tuple(x.shape[:-1]), self.compute_dtype)
        return self._checked_call(super().predict, (), given, ("steps",))

    def train_on_batch(self, *args, **kwargs):
        """Keras' ``train_on_batch``; after it every batch norm's statistics are the
        moments of the rows it normalised in the calls since the last ``fit`` (or since
        the first call), a minibatch's weight falling by ``e`` over each
        `keras_models.batch_norm_statistics.MIN_WINDOW` calls after it, as ``fit`` keeps
        them in an epoch: a loop of these calls leaves densities of the training data,
        as ``fit`` does. A flow that standardises its columns and has no statistics yet
        takes them from the first call's batch (`keras_models.zoo.base.FlowModel.adapt`
        takes them from more rows). Arguments are Keras'."""
        given = _checks.weights_kept(self, _checks.by_name(super().train_on_batch, args, kwargs))
        _checks.check_compiled(self)
        _checks.check_optimizer(self)
        x = _rows_input(given.get("x"))
        if hasattr(x, "shape") and len(x.shape) > 1 and x.shape[0] == 1 and batch_norm_layers(self):
            raise ValueError(  # as fit refuses batches of one row (`_check_training_rows`)
                f"{self.name}: train_on_batch got one row, which its batch norms would normalise by the "
                "variance of one row (0): its loss would be off by tens of nats and its step noise. "
                "Pass a batch of at least two rows.")
        if self._needs_statistics:  # a flow's standardisation, from its first batch
            self._prepare_for_training(check_training_data(self, given))
        if not self.__dict__.get("_moments_by_batch"):  # the first call since fit
            for layer in batch_norm_layers(self):
                layer.reset_epoch_moments(MIN_WINDOW)
            self.__dict__["_moments_by_batch"] = True
        _nonfinite_step(self).assign(-1)  # each call its own: a non-finite batch stops no later one
        result = self._checked_call(super().train_on_batch, (), given, ())
        store_epoch_moments(self)
        return result

    def test_on_batch(self, *args, **kwargs):
        given = _checks.weights_kept(self, _checks.by_name(super().test_on_batch, args, kwargs))
        _checks.check_compiled(self)
        return self._checked_call(super().test_on_batch, (), given, ())

    def _checked_call(self, method, args, kwargs, step_counts):
        """Keras' ``method`` after the checks of `keras_models._checks`, with the arrays of a
        model whose dtype is not floatx given in its dtype (`keras_models._checks.in_model_dtype`):
        Keras casts float arrays to floatx, which a float64 model must not see."""
        _checks.check_whole_executions(self, method, args, kwargs, step_counts)
        _checks.check_data(self, method, args, kwargs)
        return method(*args, **_checks.in_model_dtype(self, method, kwargs))

    # Keras makes these per model from the same code; TF would count every model's
    # trace as a retrace of one function and warn from the fifth (`mark_traced_on_purpose`).
    def make_train_function(self, force=False):
        # Keras builds the optimizer inside the first trace of the step. A first trace
        # that fails (a bad input) would leave its variables to the next trace, and TF
        # refuses variables created on a non-first call: every later fit would fail.
        if self.optimizer is not None and not self.optimizer.built:
            self.optimizer.build(self.trainable_variables)
        # The masks as variables, which the step reads: never folded into constants of
        # the compiled step (`tfp_maf.layers.gradient_masks.KernelMask`).
        hold_kernel_masks(self)
        # One train function with the batch norms' epoch moments and, made when a fit
        # first needs it, one without (`_keeps_epoch_moments`, read when the step is traced).
        made = self.__dict__.get("_train_functions_made") or {}
        if force or self.train_function is None or self.train_function not in made.values():
            made = {}
        keeps = self._keeps_epoch_moments
        if keeps not in made:
            self.train_function = one_step_function(self, self.train_step)
            if self.train_function is None:
                super().make_train_function(force=True)
            made[keeps] = self.train_function
        self.__dict__["_train_functions_made"] = made
        self.train_function = made[keeps]
        mark_traced_on_purpose(self.train_function)
        return self.train_function

    def make_test_function(self, force=False):
        if self.test_function is None or force:
            self.test_function = one_step_function(self, self.test_step)
            if self.test_function is None:
                super().make_test_function(force)
        mark_traced_on_purpose(self.test_function)
        return self.test_function

    def make_predict_function(self, force=False):
        super().make_predict_function(force)
        mark_traced_on_purpose(self.predict_function)
        return self.predict_function

    #: Whether the next ``fit`` takes statistics from its data (a `tf.data` dataset is
    #: then read once ahead): a flow's standardisation, before it is set.
    _needs_statistics = False

    def _prepare_for_training(self, surveys) -> None:
        """What a model does with the surveys of its training data
        (`keras_models.training_data.check_training_data`) before ``fit`` trains:
        nothing here; the flows take their standardisation statistics."""

    #: Whether the batch norms' bijectors built now keep their epoch moments (their
    #: ``keep_epoch_moments``), read when a train step is traced; `fit` sets it for its call.
    _keeps_epoch_moments = True

    @property
    def metrics(self):
        return [self.loss_tracker]

    def train_step(self, data):
        # custom_gradients_released: else the trace outlives the model. kernels_as_stored:
        # the MADEs' kernels are read as stored and their gradients masked below, where XLA
        # fuses the mask into the optimizer's update.
        with custom_gradients_released(), kernels_as_stored():
            x, y, sample_weight = unpack(data)
            x = _dequantized(self, x)
            variables = self.trainable_variables
            # Under tf.distribute each replica sees 1/R of the global batch and the
            # optimizer sums the replicas' gradients: scale so the sum is the mean.
            replicas = tf.distribute.get_strategy().num_replicas_in_sync
            with tf.GradientTape() as tape:
                nll = -_weighted_mean(self.log_prob(x, y, training=True), sample_weight)
                with _l2_set_aside(variables) as l2_factors:
                    losses = self.losses  # each read traces every regularizer again
                penalty = tf.add_n(losses) if losses else 0.0
                total = (nll + tf.cast(penalty, nll.dtype)) / replicas
            if variables:
                gradients = _plus_l2_gradients(tape.gradient(total, variables), variables, l2_factors, replicas)
                # Masked first: the masks are read through the kernels' constraints.
                gradients = mask_gradients(self, gradients, variables)
                _apply_if_finite(self, total, gradients, variables)
            self.loss_tracker.update_state(nll, sample_weight=_rows(x, sample_weight, nll.dtype))
            return self._logs()

    def test_step(self, data):
        x, y, sample_weight = unpack(data)
        log_prob = self._traced_log_prob(*self._checked(x, y))
        # Weighted by its rows, as Keras' own loss tracker: a short last batch counts for
        # what it holds, and ``evaluate`` gives the mean over the data.
        self.loss_tracker.update_state(-_weighted_mean(log_prob, sample_weight),
                                       sample_weight=_rows(x, sample_weight, log_prob.dtype))
        return self._logs()

    def predict_step(self, data):
        x, y, _ = unpack(data)  # Keras' own would read (x, y) as features and targets
        return self._traced_log_prob(*self._checked(x, y))

    def _checked(self, x, y):
        return _checks.check_x(self, x), _checks.check_y(
            self, y, "call log_prob(x, y); fit, evaluate and predict take (x, y)")

    def _logs(self) -> dict:
        loss = self.loss_tracker.result()
        if isinstance(tf.distribute.get_strategy(), tf.distribute.MultiWorkerMirroredStrategy):
            # Keras 3 averages each worker's logs with strategy.reduce("MEAN", axis=0),
            # which rejects scalars (seen with Keras 3.15): give it a vector of one.
            loss = tf.reshape(loss, [1])
        return {"loss": loss}


def _apply_if_finite(model, total, gradients, variables) -> None:
    """The optimizer's update, from gradients that are zeros where the step's loss is not
    finite or an earlier step of this ``fit`` met one; the first such step's number goes in
    `_nonfinite_step` (`NonFiniteGuard` then stops ``fit``). No non-finite value reaches
    the weights or the optimizer's state, so no checkpoint, backup or early stopping keeps
    non-finite weights; a momentum (Adam's) still moves them as after a zero gradient.

    Not an exact restore: a copy of the weights before each update cost 4 to 8% of a step
    (MAF (5), 2 x 512, batch 100); a `tf.cond` around the update about 10% (XLA fused no
    more), and under `tf.distribute` the all-reduce cannot sit in a branch."""
    finite = tf.math.is_finite(total)
    if not tf.distribute.has_strategy():  # a replica would need the variable mirrored
        flag = _nonfinite_step(model)
        finite &= flag < 0
        flag.assign(tf.where(finite | (flag >= 0), flag, tf.cast(model.optimizer.iterations, tf.int64)))
    gradients = [None if g is None else tf.where(finite, g, tf.zeros_like(g)) for g in gradients]
    with _projections_set_aside(model.optimizer, variables):
        model.optimizer.apply(gradients, variables)


def _nonfinite_step(model) -> tf.Variable:
    """The optimizer step at which ``fit`` first met a non-finite loss, or -1: not a Keras
    weight (neither saved nor exported), made once per model."""
    if "_nonfinite" not in model.__dict__:
        with tf.init_scope():
            model.__dict__["_nonfinite"] = tf.Variable(-1, dtype=tf.int64, trainable=False)
    return model.__dict__["_nonfinite"]


def _dequantized(model, x):
    """``x`` plus uniform noise on [0, 1) in the columns the model dequantizes (its
    ``dequantize`` keyword; none: ``x``), drawn afresh at each training step."""
    columns = getattr(model, "dequantize", None)
    if not columns:
        return x
    mask = np.zeros(model.event_size, np.float32)
    mask[columns] = 1.0
    x = tf.convert_to_tensor(x)
    return x + tf.random.uniform(tf.shape(x), dtype=x.dtype) * tf.constant(mask, x.dtype)


class NonFiniteGuard(keras.callbacks.Callback):
    """Stops ``fit`` at the first step whose loss is not finite, which updated from zero
    gradients (`_apply_if_finite`), and says at which epoch and step. ``fit`` adds it.

    Read after each batch in Keras' thread for callbacks (``async_safe``), so the loop
    does not wait on it."""

    async_safe = True

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch, self._first = epoch, int(self.model.optimizer.iterations.numpy())
        self._said = False

    def on_train_batch_end(self, batch, logs=None):
        step = int(_nonfinite_step(self.model).numpy())
        if step < 0 and not math.isfinite(float((logs or {}).get("loss", 0.0))):
            step = int(self.model.optimizer.iterations.numpy()) - 1  # under a strategy: the loss says it
        if step >= 0 and not self._said:
            self._said = True
            self.model.stop_training = True
            warnings.warn(
                f"{self.model.name}: the training loss was not finite at epoch {self._epoch + 1}, step "
                f"{step - self._first + 1} (optimizer step {step + 1}); training stopped there. That step "
                "updated from zero gradients, so the weights hold no NaN or infinity. A step size "
                "too large, or rows far from the rest, may cause it.", NonFiniteLossWarning, stacklevel=2)


class NonFiniteLossWarning(UserWarning):
    """``fit`` met a non-finite loss and stopped (`NonFiniteGuard`)."""


def with_nonfinite_guard(model, callbacks):
    """``fit``'s ``callbacks`` with a `NonFiniteGuard` (after the others: it only stops),
    unless they hold `keras_models.callbacks.StopOnNonFinite`, which stops and says so
    itself (`keras_models.training.fit_as_paper`'s runs, the CLI's)."""
    if any(isinstance(c, StopOnNonFinite) for c in _listed(callbacks)):
        return callbacks
    guard = NonFiniteGuard()
    if not isinstance(callbacks, keras.callbacks.CallbackList):
        return [*_listed(callbacks), guard]
    guard.set_model(model)
    guard.set_params(callbacks.params or {})
    callbacks = copy.copy(callbacks)
    callbacks.callbacks = [*callbacks.callbacks, guard]
    return callbacks


#: The optimizers (these classes, not their subclasses) whose update of an entry is zero
#: wherever its gradients have always been zero: each moment, accumulator and decay is
#: elementwise, and a scale is one number per variable (Lamb's trust ratio, Adafactor's
#: clipping). Muon is not one. `tests/test_optimizers.py` trains a flow with each of
#: Keras' optimizers and checks the masked entries stay zero.
ELEMENTWISE_OPTIMIZERS = frozenset([FusedAdam, *(
    getattr(keras.optimizers, name) for name in (
        "SGD", "Adam", "AdamW", "Adamax", "Nadam", "RMSprop", "Adagrad", "Adadelta", "Adafactor", "Ftrl",
        "Lion", "Lamb", "ScheduleFreeAdamW", "LossScaleOptimizer")
    if hasattr(keras.optimizers, name))])  # (Lamb and ScheduleFreeAdamW are newer than Keras 3.10)


@contextlib.contextmanager
def _projections_set_aside(optimizer, variables):
    """Within it, where ``optimizer`` is one of `ELEMENTWISE_OPTIMIZERS`, the masked
    kernels have no constraint, so that its ``apply`` leaves out the projection
    ``w * mask`` and its assignment after the update: 15 products and 15 writes a step
    of a MAF (5), about 3% of a small one's step.

    The kernels hold zeros outside their masks and the step masks their gradients
    (`tfp_maf.layers.mask_gradients`): an update that is zero wherever the gradients
    have always been zero, as each of `ELEMENTWISE_OPTIMIZERS` makes, keeps those zeros.
    Any other optimizer keeps the projection: Keras' `Muon`, whose orthogonalised
    updates fill a whole matrix, a subclass or a user's own (one that adds noise, say)."""
    optimizers = (optimizer, getattr(optimizer, "inner_optimizer", optimizer))  # mixed precision wraps one
    if not all(type(o) in ELEMENTWISE_OPTIMIZERS for o in optimizers):
        yield
        return
    with _cleared([v for v in variables if isinstance(getattr(v, "constraint", None), KernelMask)], "constraint"):
        yield


@contextlib.contextmanager
def _cleared(variables, attribute: str):
    """Within it, ``attribute`` of each of ``variables`` is None; after it, as it was."""
    saved = [(v, getattr(v, attribute)) for v in variables]
    try:
        for v, _ in saved:
            setattr(v, attribute, None)
        yield
    finally:
        for v, value in saved:
            setattr(v, attribute, value)


@contextlib.contextmanager
def _l2_set_aside(variables):
    """Within it, the variables whose regularizer is Keras' `keras.regularizers.L2`
    (that class: a subclass may compute otherwise) have none, so that a layer's
    ``losses`` leave their penalties out; yields ``{id(variable): l2}`` for
    `_plus_l2_gradients`, which adds the penalties' gradients themselves.

    The fit step only differentiates the penalties, and ``l2 sum(w^2)``'s gradient is
    ``2 l2 w``: one product per kernel. TF's gradient of the penalty as written traces
    about twelve ops per kernel (the square, the sum and its broadcast back, the
    gradients' sum): 180 of the 1,830 in a MAF (5)'s step, whose trace then takes about
    0.05 s longer (D 64, 2 x 128, 2 cores).
    """
    set_aside = [v for v in variables if type(v.regularizer) is keras.regularizers.L2]
    factors = {id(v): float(v.regularizer.l2) for v in set_aside}
    with _cleared(set_aside, "regularizer"):
        yield factors


def _plus_l2_gradients(gradients, variables, l2_factors, replicas):
    """``gradients`` plus ``2 l2 w / replicas`` for each variable ``w`` of `_l2_set_aside`'s
    ``l2_factors``: the gradient of its penalty ``l2 sum(w^2)`` in the replica's loss."""
    summed = []
    for g, v in zip(gradients, variables, strict=True):
        l2 = l2_factors.get(id(v))
        if l2:
            decay = tf.convert_to_tensor(v) * tf.constant(2.0 * l2 / replicas, v.dtype)
            g = decay if g is None else g + decay
        summed.append(g)
    return summed


def _weighted_mean(values, sample_weight):
    """The mean of ``values``, weighted by ``sample_weight`` when given; 0 for a batch
    whose weights sum to 0 (it weighs nothing in the epoch's mean, `_rows`, and has no
    gradient)."""
    if sample_weight is None:
        return tf.reduce_mean(values)
    weights = tf.cast(tf.reshape(sample_weight, tf.shape(values)), values.dtype)
    return tf.math.divide_no_nan(tf.reduce_sum(values * weights), tf.reduce_sum(weights))


def _rows(x, sample_weight, dtype):
    """What a batch weighs in an epoch's mean loss: its rows, or its sample weights' sum."""
    if sample_weight is None:
        return tf.cast(tf.shape(x)[0], dtype)
    return tf.reduce_sum(tf.cast(sample_weight, dtype))


def _rows_input(x):
    """``x`` of ``fit``, ``evaluate`` or ``predict``, or the ``x`` of an ``(x, y)`` given as
    ``x`` (``fit((x, y))``): what says how many rows came."""
    return x[0] if isinstance(x, (tuple, list)) and x else x


def _check_training_rows(model, given: dict) -> None:
    """Refuses arrays that ``fit`` would train on nothing (no rows: Keras ran no step and
    said nothing), or cut into batches with one of a single row, for a model with batch
    norms: in training a batch norm normalises a batch by its own variance, and one row
    has none (0): the row's loss is off by tens of nats, and its step is noise (torch's
    batch norm refuses such a batch too). A `tf.data` pipeline is its maker's
    (`keras_models.data.make_pipelines` leaves such a row out), but one that was never
    batched, whose elements are single rows ``[D]`` that Keras takes each as a batch,
    is refused: one row a step, each normalised by its own variance."""
    _check_batched(model, given.get("x"))
    x = _rows_input(given.get("x"))
    if not hasattr(x, "shape") or len(x.shape) < 2 or x.shape[0] is None or given.get("steps_per_epoch"):
        return
    rows, batch = int(x.shape[0]), int(given.get("batch_size") or 32)  # Keras' default
    rows = math.floor(rows * (1.0 - (given.get("validation_split") or 0.0)))  # as Keras splits
    if rows == 0:
        raise ValueError(f"{model.name}: fit needs at least one training row, got x of shape {list(x.shape)}.")
    if (batch == 1 or rows % batch == 1) and batch_norm_layers(model):
        other = next((b for b in range(max(2, batch - 1), batch + 10) if b != batch and rows % b != 1), None)
        raise ValueError(
            f"{model.name}: {rows} training rows in batches of {batch} leave a batch of one row, which its "
            "batch norms would normalise by the variance of one row (0): its loss would be off by tens of "
            "nats and its step noise. Pass a batch_size that leaves no single row"
            f"{'' if other is None else f' (e.g. {other})'}, or drop a row.")


def _check_batched(model, dataset) -> None:
    """Refuses a `tf.data.Dataset` of training rows whose elements are single rows (its
    ``x`` of shape ``[D]``): ``from_tensor_slices(x)`` without ``.batch(...)``."""
    if not isinstance(dataset, tf.data.Dataset):
        return
    x, _, _ = unpack(dataset.element_spec)
    shape = getattr(x, "shape", None)
    if shape is not None and shape.rank == 1 and shape[0] == model.event_size:  # else the width check says
        raise ValueError(
            f"{model.name}: fit got a tf.data.Dataset whose elements are single rows (x of shape "
            f"{shape.as_list()}); Keras would take each as a batch of one row, one step each"
            f"{', which the batch norms would normalise by its own variance (0)' if batch_norm_layers(model) else ''}. "
            "Batch it: dataset.batch(100).")


def _listed(callbacks) -> list:
    return callbacks.callbacks if isinstance(callbacks, keras.callbacks.CallbackList) else list(callbacks or [])


def _uses_epoch_statistics(callbacks) -> bool:
    return any(isinstance(c, EpochStatistics) for c in _listed(callbacks))


def with_epoch_statistics(model, callbacks):
    """``fit``'s ``callbacks`` with `EpochStatistics` first, unless they set the statistics
    by the paper's exact pass (`BatchNormStatistics`, `ValidationWithStatistics`) or
    already have it."""
    listed = _listed(callbacks)
    if any(isinstance(c, (BatchNormStatistics, ValidationWithStatistics, EpochStatistics)) for c in listed):
        return callbacks
    epoch_statistics = EpochStatistics()
    if not isinstance(callbacks, keras.callbacks.CallbackList):
        return [epoch_statistics, *listed]
    # Keras runs a CallbackList as given: its model and parameters are already set.
    epoch_statistics.set_model(model)
    epoch_statistics.set_params(callbacks.params or {})
    callbacks = copy.copy(callbacks)  # the caller's list stays as it was
    callbacks.callbacks = [epoch_statistics, *listed]
    return callbacks
