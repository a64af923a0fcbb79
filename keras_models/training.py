"""Training as in the paper: Adam, minibatch 100, L2 1e-6, early stopping (patience 30).

Long runs are protected: `RunBackup` lets a killed run continue exactly where it
stopped, and `StopOnNonFinite` ends a run whose loss stops being finite with the last
good weights in place.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from keras_models import _kernel_layout
from keras_models.batch_norm_statistics import BatchNormStatistics
from keras_models.density_model import DensityModel
from keras_models.progress import TrainingProgress
from keras_models.zoo import LEARNING_RATES

__all__ = [
    "BatchNormStatistics",
    "RunBackup",
    "ShuffleEpoch",
    "StopOnNonFinite",
    "TimeBudget",
    "compile_as_paper",
    "fit_as_paper",
]


class TimeBudget(keras.callbacks.Callback):
    """Stops training at the end of the epoch during which ``minutes`` ran out."""

    def __init__(self, minutes: float):
        super().__init__()
        self.seconds = 60.0 * minutes
        self.stopped = False

    def on_train_begin(self, logs=None):
        self.start = time.monotonic()

    def on_epoch_end(self, epoch, logs=None):
        if time.monotonic() - self.start > self.seconds:
            self.stopped = True
            self.model.stop_training = True


class ShuffleEpoch(keras.callbacks.Callback):
    """Keeps a pipeline's shuffle counter (`keras_models.data.array_dataset`) equal
    to Keras' epoch number, so that a resumed run replays the batches of each epoch."""

    def __init__(self, counter):
        super().__init__()
        self.counter = counter

    def on_epoch_begin(self, epoch, logs=None):
        self.counter.assign(epoch)


class StopOnNonFinite(keras.callbacks.Callback):
    """Stops training at the first non-finite training loss and puts back the
    weights of the last epoch that ended finite.

    Keras' ``TerminateOnNaN`` stops too, but leaves the NaN weights in the model;
    here what was learned up to the last good epoch is kept. ``message`` says what
    happened (``None`` while all is well); it is also written to stderr.
    """

    def __init__(self):
        super().__init__()
        self.message = None

    def on_train_begin(self, logs=None):
        self.message = None
        self._good, self._good_epoch = self.model.get_weights(), None

    def on_epoch_end(self, epoch, logs=None):
        values = [v for k, v in (logs or {}).items() if k in ("loss", "val_loss")]
        if all(math.isfinite(_scalar(v)) for v in values):
            self._good, self._good_epoch = self.model.get_weights(), epoch

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is None or math.isfinite(_scalar(loss)) or self.message:
            return
        self.model.set_weights(self._good)
        self.model.stop_training = True
        kept = "the initial weights" if self._good_epoch is None else f"the weights of epoch {self._good_epoch + 1}"
        self.message = (
            f"training stopped: the training loss became {_scalar(loss)} at step {batch + 1} of "
            f"the epoch; kept {kept}, the last whose losses were finite. Try a smaller "
            "learning rate, or log_scale_bound=... on the model (see the README)."
        )
        print(f"tfp-maf: {self.message}", file=sys.stderr)


class RunBackup(keras.callbacks.Callback):
    """Backs up a run at the end of every epoch so that, killed at any moment and
    started again with the same arguments, it continues as if never interrupted.

    What `keras.callbacks.BackupAndRestore` saves (the weights, the optimizer's
    state, the epoch) is not enough for that: early stopping's state (its best
    loss, its patience counter and the best weights) would start afresh and the
    resumed run would stop at a different epoch with different weights. This
    callback saves all of it, and ``stopper`` (the run's `EarlyStopping`, placed
    before this callback) gets it back.

    Each epoch writes new files and then replaces ``state.json``, which names them:
    a run killed while writing resumes from the previous epoch, never from a mix.
    ``resumed_from`` is the epoch a resumed run started at (``None`` if fresh);
    ``seconds`` the training time of the run so far, over every resumption.
    Pass ``initial_epoch=backup.saved_epoch()`` to `fit`, so that it counts on from
    there (what `keras.callbacks.BackupAndRestore` does by writing a private attribute
    of the model).
    """

    STATE = "state.json"

    def __init__(self, directory, stopper: keras.callbacks.EarlyStopping | None = None):
        super().__init__()
        self.directory = Path(directory)
        self.stopper = stopper
        self.resumed_from = None
        self._seconds_before, self._begin = 0.0, None

    def saved_epoch(self) -> int:
        """The epochs the backed-up run had finished (0 for none): fit's ``initial_epoch``."""
        state_path = self.directory / self.STATE
        return json.loads(state_path.read_text())["epoch"] if state_path.exists() else 0

    @property
    def seconds(self) -> float:
        """Training time so far, summed over the runs this backup resumed."""
        return self._seconds_before + (time.monotonic() - self._begin if self._begin is not None else 0.0)

    def on_train_begin(self, logs=None):
        self._begin = time.monotonic()
        state_path = self.directory / self.STATE
        if not state_path.exists():
            return
        state = json.loads(state_path.read_text())
        self._seconds_before = state.get("seconds", 0.0)
        if self.model.optimizer is not None and not self.model.optimizer.built:
            self.model.optimizer.build(self.model.trainable_variables)
        self.model.load_weights(self.directory / state["weights"])
        if self.stopper is not None and state.get("stopper"):
            saved = state["stopper"]
            self.stopper.best, self.stopper.wait = saved["best"], saved["wait"]
            self.stopper.best_epoch = saved["best_epoch"]
            if saved.get("best_weights"):
                with np.load(self.directory / saved["best_weights"]) as f:
                    best = [f[f"arr_{i}"] for i in range(len(f.files))]
                # Saved with the MADEs' kernels stored otherwise (dense before 0.3, or by
                # "auto" on another kind of device), it holds them in that storage.
                self.stopper.best_weights = _kernel_layout.weights_list(self.model, best)
        self.resumed_from = state["epoch"]

    def on_epoch_end(self, epoch, logs=None):
        self.directory.mkdir(parents=True, exist_ok=True)
        tag = f"epoch-{epoch + 1}"
        state = {"epoch": epoch + 1, "weights": f"{tag}.weights.h5", "seconds": round(self.seconds, 1)}
        self.model.save_weights(self.directory / state["weights"], overwrite=True)
        if self.stopper is not None:
            saved = {"best": _scalar(self.stopper.best), "wait": int(self.stopper.wait),
                     "best_epoch": int(self.stopper.best_epoch), "best_weights": None}
            if self.stopper.best_weights is not None:
                # Named by the best epoch: written once when it changes, not every epoch.
                saved["best_weights"] = f"best-{saved['best_epoch'] + 1}.npz"
                if not (self.directory / saved["best_weights"]).exists():
                    _save_atomically(self.directory / saved["best_weights"], self.stopper.best_weights)
            state["stopper"] = saved
        write_atomically(self.directory / self.STATE, json.dumps(state, indent=2))
        keep = {self.STATE, state["weights"], state.get("stopper", {}).get("best_weights")}
        for path in self.directory.iterdir():
            if path.name not in keep:
                path.unlink()


def _scalar(value) -> float:
    # Multi-worker logs are vectors of one (see DensityModel._logs).
    return float(np.mean(value))


def _save_atomically(path: Path, arrays) -> None:
    # A kill mid-write must not leave a file that "exists" but is partial.
    partial = path.with_name(path.name + ".partial.npz")
    np.savez(partial, *arrays)
    os.replace(partial, path)


def write_atomically(path: Path, text: str) -> None:
    """Writes ``text`` to ``path`` so that a kill mid-write leaves the previous file whole."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    os.replace(partial, path)  # atomic on POSIX and Windows


def compile_as_paper(model: DensityModel, model_name: str = "maf5", jit_compile=True,
                     steps_per_execution: int = 10, learning_rate: float | None = None) -> DensityModel:
    """Adam with the paper's step size for this model (1e-3 MADE / MADE MoG, 1e-4 flows),
    or ``learning_rate`` if given.

    XLA by default: it fuses Keras 3's per-variable optimizer ops and the small
    elementwise ops of the flows, which made every measured model train faster on CPU
    (``benchmarks/results/speed.md``, ``mnist_epochs.md``); ``jit_compile=False`` turns it off.

    ``steps_per_execution`` steps run per call into the compiled loop, and Keras 3
    only runs whole calls: the model then refuses a ``steps_per_epoch``,
    ``validation_steps`` or ``steps`` that is not a multiple of it (Keras would
    silently run more). Pass ``steps_per_execution=1`` for any count.

    Called inside a `tf.distribute` strategy's scope with several replicas, it
    compiles without XLA and one step per call: TensorFlow cannot XLA-compile a
    step whose variables are mirrored on other devices, and Keras' multi-step loop
    fails under `MirroredStrategy` (both seen with TensorFlow 2.21).
    """
    if tf.distribute.has_strategy() and tf.distribute.get_strategy().num_replicas_in_sync > 1:
        jit_compile, steps_per_execution = False, 1
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate or LEARNING_RATES.get(model_name, 1e-4)),
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

    ``backup_dir``: back the run up there every epoch (`RunBackup`); a run started
    again with the same directory continues where the last one stopped.
    ``shuffle_epoch``: the training pipeline's shuffle counter
    (``Pipelines.epoch``), which a resumed run needs to replay the same batches.
    """
    if model.fit_in_closed_form(x_train, y_train):
        return None, {"epochs": 0, "early_stopped": True, "closed_form": True}
    stopper = keras.callbacks.EarlyStopping(
        monitor="val_loss", patience=patience, restore_best_weights=True
    )
    non_finite = StopOnNonFinite()
    budget = TimeBudget(max_minutes) if max_minutes else None
    backup = RunBackup(backup_dir, stopper) if backup_dir else None
    for callback in callbacks:
        if isinstance(callback, TrainingProgress):
            callback.stopper = stopper  # a resumed run's best epoch came before this process
    # Order matters: the shuffle counter is set before the epoch's data is read;
    # the backup runs after early stopping has updated its state.
    all_callbacks = [ShuffleEpoch(shuffle_epoch)] if shuffle_epoch is not None else []
    all_callbacks += [*callbacks, non_finite, stopper]
    all_callbacks += [c for c in (backup, budget) if c is not None]
    all_callbacks.append(BatchNormStatistics(x_train, y_train))
    history = model.fit(
        train_ds, validation_data=val_ds, epochs=max_epochs, callbacks=all_callbacks, verbose=verbose,
        shuffle=False,  # the pipeline shuffles (a fresh permutation each epoch)
        initial_epoch=backup.saved_epoch() if backup else 0,
    )
    resumed_from = backup.resumed_from if backup else None
    epochs = history.epoch[-1] + 1 if history.epoch else (resumed_from or 0)
    return history, {
        "epochs": epochs,
        "early_stopped": bool(stopper.stopped_epoch) and epochs < max_epochs
        and not (budget and budget.stopped) and not non_finite.message,
        "best_val_loss": _scalar(stopper.best),
        "resumed_from_epoch": resumed_from,
        "train_seconds": round(backup.seconds, 1) if backup else None,
        "stopped_on_non_finite": non_finite.message,
    }
