"""Training as in the paper: Adam, minibatch 100, L2 1e-6, early stopping (patience 30).

Long runs are protected (`keras_models.callbacks`, re-exported here): `RunBackup` lets a
killed run continue exactly where it stopped, and `StopOnNonFinite` ends a run whose loss
stops being finite with the last good weights in place.

`compile_as_paper` sets the optimizer, `fit_as_paper` the loop (early stopping on the
validation loss, the best weights restored, the batch norms' statistics set from the
training set, `BatchNormStatistics`). The callbacks work in any ``fit``; see
`fit_as_paper` for the whole recipe.

Example: the paper's optimizer, and the paper's batch-norm statistics (a pass over the
whole training set) in a plain ``fit``, in place of those ``fit`` stores each epoch:

>>> import numpy as np
>>> from keras_models import MAF, training
>>> x = np.random.default_rng(0).standard_normal((200, 2)).astype(np.float32)
>>> model = training.compile_as_paper(MAF(2, hidden_units=[8], num_layers=2), "maf5")
>>> round(float(model.optimizer.learning_rate), 6)
0.0001
>>> statistics = training.BatchNormStatistics(x)  # for model.fit(x, ..., callbacks=[statistics])
"""

from __future__ import annotations

import math
import warnings
import weakref

import keras
import numpy as np
import tensorflow as tf

from keras_models._checks import unpack
from keras_models.batch_norm_statistics import (
    BatchNormStatistics,
    EpochStatistics,
    ValidationWithStatistics,
)
from keras_models.callbacks import (
    RunBackup,
    ShuffleEpoch,
    StopOnNonFinite,
    TimeBudget,
    log_scalar,
)
from keras_models.data.pipeline import counts_its_passes
from keras_models.density_model import DensityModel
from keras_models.model_functions import rows_per_call
from keras_models.optimizers import FusedAdam
from keras_models.presets import LEARNING_RATES
from keras_models.progress import TrainingProgress

__all__ = [
    "BatchNormStatistics",
    "EpochStatistics",
    "RunBackup",
    "ShuffleEpoch",
    "StopOnNonFinite",
    "TimeBudget",
    "ValidationWithStatistics",
    "compile_as_paper",
    "fit_as_paper",
]


def _decide_xla(model, train_ds, patience: int, max_epochs: int) -> None:
    """For a model compiled with ``jit_compile="auto"`` whose train step is not made
    yet: no XLA if even the shortest run takes fewer than `XLA_BREAK_EVEN_STEPS` steps.
    The shortest run stops early after ``patience + 1`` epochs, or ends after
    ``max_epochs`` if fewer."""
    if model not in _XLA_AUTO or model.train_function is not None:
        return
    steps = int(train_ds.cardinality()) if isinstance(train_ds, tf.data.Dataset) else -1
    if 0 < steps and steps * min(patience + 1, max_epochs) < XLA_BREAK_EVEN_STEPS:
        model.jit_compile = False
        if _XLA_AUTO[model]:
            # Keras' multi-step loop (a while loop and a cond around the step) adds about
            # 0.7 s to the first trace (MAF (5) of 2 x 128, 2 cores) and saves a few
            # milliseconds per call: a run this short is quicker one step per call.
            model.steps_per_execution = 1


def _validation_rows(model, val_ds, x_train):
    """``(x_val, y_val)``, where the validation can ride on the statistics pass
    (`keras_models.batch_norm_statistics.ValidationWithStatistics`): a training set of
    one call through the flow and a validation dataset of one batch of ``x`` or
    ``(x, y)``; else None (Keras validates). On a small dataset Keras' validation (its
    traced test step, a new iterator and its loop each epoch) took a tenth of a run
    (digits, MAF (5) of 2 x 128, 2 cores)."""
    if not isinstance(val_ds, tf.data.Dataset) or int(val_ds.cardinality()) != 1:
        return None
    if len(x_train) > rows_per_call(int(np.prod(np.shape(x_train)[1:]))):
        return None
    x, y, weights = unpack(next(iter(val_ds)))
    if weights is not None or (y is None) != (model.conditional_dims is None):
        return None  # Keras' validation weighs the rows, or says what is missing
    return x, y


def _whole_passes(model, train_ds, val_ds) -> dict:
    """``steps_per_epoch`` and ``validation_steps`` for ``fit``: one whole pass of each
    dataset of known length (where the model's ``steps_per_execution`` divides it)."""
    counts = {}
    for name, ds in (("steps_per_epoch", train_ds), ("validation_steps", val_ds)):
        steps = int(ds.cardinality()) if isinstance(ds, tf.data.Dataset) else -1
        if steps > 0 and steps % model.steps_per_execution == 0:
            counts[name] = steps
    return counts


def _streams(train_ds, val_ds, counts: dict, shuffle_epoch):
    """The datasets as ``fit`` reads them: repeated, where ``counts`` (`_whole_passes`)
    makes an epoch one pass of each, and a training pipeline with a shuffle counter
    advances it itself (`keras_models.data.counts_its_passes`).

    The same batches, pass by pass, as reading each dataset anew every epoch; but Keras
    then keeps one iterator of each for the whole run, where a dataset of known length
    gets a fresh iterator each epoch. Making one costs milliseconds (TensorFlow
    instantiates the pipeline's functions): 13 ms an epoch of a shuffled pipeline and a
    validation one (2 cores), a tenth of an epoch of a small dataset's run. A counter
    that only `ShuffleEpoch` sets needs an iterator an epoch, made after it is set.
    """
    if "steps_per_epoch" in counts and (shuffle_epoch is None or counts_its_passes(shuffle_epoch)):
        train_ds = train_ds.repeat()
    if "validation_steps" in counts:
        val_ds = val_ds.repeat()
    return train_ds, val_ds


#: Training steps after which XLA has paid for its compilation. XLA makes each step
#: faster (it fuses the flows' small elementwise ops) but compiles for seconds first.
#: Measured with `benchmarks/small_data.py` (MAF (5) of 2 x 128, D 64, batch 100, 2 cores,
#: `FusedAdam`): XLA's first epoch took 5 to 6 s longer and each later step 1 to 3 ms less,
#: so it pays after 2,000 to 5,000 steps.
XLA_BREAK_EVEN_STEPS = 2_500

# Models compiled with jit_compile="auto": `fit_as_paper` decides for them. The value
# says whether steps_per_execution was left to it as well.
_XLA_AUTO: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def compile_as_paper(model: DensityModel, model_name: str = "maf5", jit_compile="auto",
                     steps_per_execution: int | None = None, learning_rate: float | None = None) -> DensityModel:
    """Adam with the paper's step size for this model (1e-3 MADE / MADE MoG, 1e-4 flows),
    or ``learning_rate`` if given.

    XLA where it pays: it makes every measured model's steps faster on CPU
    (`docs/performance.md`), but compiling costs seconds before the first step. With
    ``jit_compile="auto"`` (the default) the model compiles with XLA, and `fit_as_paper`
    turns XLA off for a run too short to repay it: one whose shortest length,
    ``patience + 1`` epochs of the training pipeline's steps (early stopping's earliest
    stop) or ``max_epochs`` if fewer, is under `XLA_BREAK_EVEN_STEPS` (a small dataset:
    1,200 rows of batch 100 take 12 steps an epoch; a trial of two epochs). ``True`` or
    ``False`` decides for every run.

    ``steps_per_execution`` steps run per call into the compiled loop (default 10, and 1
    where `fit_as_paper` turns XLA off: a run that short is quicker without the loop's
    trace), and Keras 3 only runs whole calls: the model then refuses a ``steps_per_epoch``,
    ``validation_steps`` or ``steps`` that is not a multiple of it (Keras would
    silently run more). Pass ``steps_per_execution=1`` for any count.

    Called inside a `tf.distribute` strategy's scope with several replicas, it
    compiles without XLA and one step per call: TensorFlow cannot XLA-compile a
    step whose variables are mirrored on other devices, and Keras' multi-step loop
    fails under `MirroredStrategy` (both seen with TensorFlow 2.21).

    Args:
      model: a `keras_models.DensityModel`.
      model_name: the zoo's name of the model (`keras_models.build`), which picks
        the step size: ``"made"`` and ``"made-mog"`` get ``1e-3``, every other name
        ``1e-4``.
      jit_compile: compile the steps with XLA (Keras' ``jit_compile``), or
        ``"auto"``: with XLA where Keras supports it (not with TensorFlow's op
        determinism enabled), unless `fit_as_paper` finds the run too short for it.
      steps_per_execution: training steps per call into the compiled loop; None: 10,
        or 1 where ``"auto"`` turns XLA off.
      learning_rate: Adam's step size, overriding the paper's.

    Returns:
      ``model``, compiled (no loss: the model computes its own).

    Example:

    >>> from keras_models import MADE, MAF
    >>> model = compile_as_paper(MADE(2, hidden_units=[8]), "made")
    >>> round(float(model.optimizer.learning_rate), 6), model.steps_per_execution
    (0.001, 10)
    >>> model = compile_as_paper(MAF(2, hidden_units=[8]), "maf5")
    >>> round(float(model.optimizer.learning_rate), 6)
    0.0001
    """
    auto_steps = steps_per_execution is None
    steps_per_execution = 10 if auto_steps else steps_per_execution
    if tf.distribute.has_strategy() and tf.distribute.get_strategy().num_replicas_in_sync > 1:
        jit_compile, steps_per_execution = False, 1
    auto = jit_compile == "auto"
    if auto:
        # Keras' own "auto" turns XLA off on every CPU-only machine, where it pays here.
        _XLA_AUTO[model] = auto_steps
        jit_compile = True
    else:
        _XLA_AUTO.pop(model, None)
    with warnings.catch_warnings():
        if auto:
            # Where Keras cannot use XLA (TensorFlow's op determinism enabled, a layer
            # without XLA support) it compiles without and warns that True was refused:
            # "auto" asked for XLA only where it is supported, so the warning is noise.
            warnings.filterwarnings("ignore", message="Model doesn't support `jit_compile=True`")
        model.compile(
            optimizer=FusedAdam(learning_rate or LEARNING_RATES.get(model_name, 1e-4)),
            jit_compile=jit_compile,
            # Several steps per call into the compiled function: Keras' per-call Python
            # overhead (milliseconds) otherwise dominates the steps of small models.
            steps_per_execution=steps_per_execution,
        )
    return model


def fit_as_paper(
    model: DensityModel,
    train_ds,
    val_ds,
    x_train: np.ndarray,
    y_train: np.ndarray | None = None,
    max_epochs: int = 1000,
    patience: int = 30,
    max_minutes: float | None = None,
    callbacks=(),
    verbose="auto",
    backup_dir=None,
    shuffle_epoch=None,
):
    """Trains until the validation log-likelihood has not improved for
    ``patience`` epochs, restores the best weights, and sets the batch-norm
    statistics. Returns ``(history, info)``; ``info`` says how many epochs ran,
    whether early stopping was reached, the epoch a resumed run started at, and
    why training stopped if the loss stopped being finite.

    A model with a closed form (`keras_models.Gaussian`) is fitted in it instead,
    and nothing is trained.

    Args:
      model: a compiled `keras_models.DensityModel` (`compile_as_paper`).
      train_ds: the training data, as ``fit`` takes it: a `tf.data.Dataset` of
        ``x`` or ``(x, y)`` batches (`keras_models.data.Pipelines.train`). It is
        not shuffled here: the pipeline shuffles.
      val_ds: the validation data, as ``fit``'s ``validation_data``.
      x_train: the whole training set ``[N, D]`` as an array, for the batch
        norms' statistics and a closed-form fit.
      y_train: its side information ``[N, K]`` for a conditional model.
      max_epochs: the most epochs to run.
      patience: epochs without a better validation loss before stopping (30 in
        the paper).
      max_minutes: stop at the end of the epoch in which this many minutes ran
        out (`TimeBudget`); None for no limit.
      callbacks: more Keras callbacks, run before the ones added here (but after
        `ValidationWithStatistics`, where it validates: they see ``val_loss``).
      verbose: as ``fit``'s.
      backup_dir: back the run up there every epoch (`RunBackup`); a run started
        again with the same directory continues where the last one stopped.
      shuffle_epoch: the training pipeline's shuffle counter
        (``Pipelines.epoch``), which a resumed run needs to replay the same batches.

    Returns:
      ``(history, info)``: Keras' ``History`` (None for a closed-form fit) and a
      dict with ``epochs`` (the last epoch run, counting those of earlier runs
      resumed from), ``early_stopped``, ``best_val_loss``,
      ``resumed_from_epoch`` (None for a fresh run), ``train_seconds`` (with a
      backup, over every resumption; else None), ``stopped_on_non_finite``
      (`StopOnNonFinite`'s message, or None) and ``non_finite_val_epochs`` (the
      epochs of this call whose validation loss was inf or NaN). A closed-form fit gives
      ``{"epochs": 0, "early_stopped": True, "closed_form": True}``.

    Raises:
      ValueError: if ``max_epochs`` is below 1.

    Example: the paper's recipe on a small sample of the Figure 1 density:

    >>> from keras_models import MADE, data
    >>> splits = data.load("figure1", n_train=64, n_val=32, n_test=32)
    >>> pipes = splits.pipelines(batch_size=16, eval_batch_size=32)
    >>> model = compile_as_paper(MADE(2, hidden_units=[8]), "made",
    ...                          jit_compile=False)  # XLA pays on long runs only
    >>> history, info = fit_as_paper(model, pipes.train, pipes.validation, splits.x_train,
    ...                              max_epochs=2, verbose=0, shuffle_epoch=pipes.epoch)
    >>> info["epochs"], info["early_stopped"], len(history.history["val_loss"])
    (2, False, 2)
    >>> info["stopped_on_non_finite"], info["resumed_from_epoch"], info["non_finite_val_epochs"]
    (None, None, 0)
    """
    if int(max_epochs) < 1:
        raise ValueError(f"fit_as_paper needs max_epochs of at least 1, got {max_epochs}.")
    if model.fit_in_closed_form(x_train, y_train):
        return None, {"epochs": 0, "early_stopped": True, "closed_form": True}
    standardization = getattr(model, "standardization", None)
    if standardization is not None and not standardization.adapted:
        model.adapt(x_train, y_train)  # from the arrays: no pass of the pipeline, whose shuffles it would move
    _decide_xla(model, train_ds, patience, max_epochs)
    stopper = keras.callbacks.EarlyStopping(
        monitor="val_loss", patience=patience, restore_best_weights=True
    )
    non_finite = StopOnNonFinite()
    budget = TimeBudget(max_minutes) if max_minutes else None
    backup = RunBackup(backup_dir, stopper) if backup_dir else None
    for callback in callbacks:
        if isinstance(callback, TrainingProgress):
            callback.stopper = stopper  # a resumed run's best epoch came before this process
    initial_epoch = backup.saved_epoch() if backup else 0
    validation = _validation_rows(model, val_ds, x_train)
    if validation is not None:  # validated with the statistics pass, in its call
        val_ds = None
    counts = _whole_passes(model, train_ds, val_ds)
    train_stream, val_stream = _streams(train_ds, val_ds, counts, shuffle_epoch)
    # First: the callbacks after it read the validation loss it gives.
    all_callbacks = [] if validation is None else [ValidationWithStatistics(x_train, y_train, *validation)]
    if shuffle_epoch is not None:
        if train_stream is not train_ds:
            # One iterator reads pass after pass, and each pass counts itself from here.
            shuffle_epoch.assign(initial_epoch)
        else:  # an iterator an epoch: set the counter before each epoch's data is read
            all_callbacks.append(ShuffleEpoch(shuffle_epoch))
    # Order matters: the backup runs after early stopping has updated its state.
    all_callbacks += [*callbacks, non_finite, stopper]
    all_callbacks += [c for c in (backup, budget) if c is not None]
    all_callbacks.append(BatchNormStatistics(x_train, y_train))
    history = model.fit(
        train_stream, validation_data=val_stream, epochs=max_epochs, callbacks=all_callbacks,
        verbose=verbose,
        shuffle=False,  # the pipeline shuffles (a fresh permutation each epoch)
        initial_epoch=initial_epoch,
        **counts,
    )
    resumed_from = backup.resumed_from if backup else None
    epochs = history.epoch[-1] + 1 if history.epoch else (resumed_from or 0)
    return history, {
        "epochs": epochs,
        "early_stopped": bool(stopper.stopped_epoch) and epochs < max_epochs
        and not (budget and budget.stopped) and not non_finite.message,
        "best_val_loss": log_scalar(stopper.best),
        "resumed_from_epoch": resumed_from,
        "train_seconds": round(backup.seconds, 1) if backup else None,
        "stopped_on_non_finite": non_finite.message,
        # Epochs of this process whose validation loss was inf or NaN: early stopping
        # never keeps such an epoch, but a user should hear of it (the progress line says it too).
        "non_finite_val_epochs": sum(
            not math.isfinite(log_scalar(v)) for v in (history.history.get("val_loss", []) if history else [])),
    }
