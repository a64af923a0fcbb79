"""Callbacks for long runs, in any ``fit``: a time budget, a shuffle seeded per epoch, a
stop on a non-finite loss with the last good weights, and a backup that lets a killed
run continue exactly where it stopped (`keras_models.training.fit_as_paper` uses them all).
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

from keras_models import kernel_storage
from keras_models.model_functions import model_function

__all__ = ["RunBackup", "ShuffleEpoch", "StopOnNonFinite", "TimeBudget", "log_scalar", "write_atomically"]


class TimeBudget(keras.callbacks.Callback):
    """Stops training at the end of the epoch during which ``minutes`` ran out.

    `fit_as_paper` adds it when given ``max_minutes``; in a ``fit`` of your own,
    pass it with the other callbacks: ``model.fit(..., callbacks=[TimeBudget(60)])``.

    Args:
      minutes: the training time allowed, counted from the start of ``fit``.

    Attributes:
      stopped: whether this callback ended the run.

    Example: what ``fit`` does with it, step by step, with a budget spent at once:

    >>> from keras_models import MADE
    >>> budget = TimeBudget(minutes=0)
    >>> budget.set_model(MADE(2, hidden_units=[8]))
    >>> budget.on_train_begin()
    >>> budget.on_epoch_end(0)  # the first epoch ends: the time is up
    >>> budget.stopped, budget.model.stop_training
    (True, True)
    """

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
    to Keras' epoch number, so that a resumed run replays the batches of each epoch.

    `fit_as_paper` adds it when given ``shuffle_epoch``.

    Args:
      counter: the pipeline's int64 `tf.Variable` (``Pipelines.epoch``).
    """

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

    `fit_as_paper` always uses it; add it to the callbacks of a ``fit`` of your own.

    Attributes:
      message: why training stopped, or None.
    """

    def __init__(self):
        super().__init__()
        self.message = None

    def on_train_begin(self, logs=None):
        self.message = None
        self._good, self._good_epoch = self._snapshot(), None

    def on_epoch_end(self, epoch, logs=None):
        values = [v for k, v in (logs or {}).items() if k in ("loss", "val_loss")]
        if all(math.isfinite(log_scalar(v)) for v in values):
            self._good, self._good_epoch = self._snapshot(), epoch

    def _snapshot(self):
        # The weights' values as tensors: no copy until a step updates a variable (which
        # then writes a new buffer); NumPy copies cost more than the epoch of a small model.
        # Read in one call of a traced function: read one by one, eagerly, they cost 2.7
        # ms an epoch (a MAF (5)'s 50 weights, 2 cores), 4% of a small dataset's epoch.
        weights = self.model.weights
        return model_function(self.model, "weights' values", None,
                              lambda: [tf.convert_to_tensor(w) for w in weights])()

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is None or math.isfinite(log_scalar(loss)) or self.message:
            return
        self.model.set_weights(self._good)
        self.model.stop_training = True
        kept = "the initial weights" if self._good_epoch is None else f"the weights of epoch {self._good_epoch + 1}"
        self.message = (
            f"training stopped: the training loss became {log_scalar(loss)} at step {batch + 1} of "
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
    of the model). `fit_as_paper` does all this when given ``backup_dir``.

    The directory holds the last epoch's weights (``epoch-E.weights.h5``, the
    optimizer's state included), ``state.json`` and, with a ``stopper``, the best
    weights so far (``best-E.npz``); older files are deleted.

    Args:
      directory: where to write; created at the first epoch's end.
      stopper: the run's `keras.callbacks.EarlyStopping`, whose state is saved and
        restored with the run's; None for a run without early stopping.

    Example: a run of one epoch, then the same run started again for two:

    >>> import keras, os, tempfile, numpy as np
    >>> from keras_models import MADE
    >>> model = MADE(2, hidden_units=[8])
    >>> model.compile(optimizer=keras.optimizers.Adam(1e-3))
    >>> x = np.random.default_rng(0).normal(size=(32, 2)).astype(np.float32)
    >>> directory = tempfile.mkdtemp()
    >>> backup = RunBackup(directory)
    >>> _ = model.fit(x, epochs=1, callbacks=[backup], initial_epoch=backup.saved_epoch(),
    ...               verbose=0)
    >>> sorted(os.listdir(directory))
    ['epoch-1.weights.h5', 'state.json']
    >>> backup = RunBackup(directory)  # as a new process would
    >>> history = model.fit(x, epochs=2, callbacks=[backup],
    ...                     initial_epoch=backup.saved_epoch(), verbose=0)
    >>> backup.resumed_from, history.epoch  # only the second epoch ran
    (1, [1])
    """

    STATE = "state.json"

    def __init__(self, directory, stopper: keras.callbacks.EarlyStopping | None = None):
        super().__init__()
        self.directory = Path(directory)
        self.stopper = stopper
        self.resumed_from = None
        self._seconds_before, self._begin = 0.0, None

    def saved_epoch(self) -> int:
        """The epochs the backed-up run had finished (0 for none): fit's ``initial_epoch``.

        Returns:
          An int: the epoch of ``state.json``, or 0 when there is none.
        """
        state_path = self.directory / self.STATE
        return self._state(state_path)["epoch"] if state_path.exists() else 0

    def _state(self, path) -> dict:
        try:
            return json.loads(path.read_text())
        except ValueError as err:
            raise ValueError(f"the backup's {path} is not valid JSON ({err}): delete {self.directory} to start "
                             "the run afresh.") from None

    @property
    def seconds(self) -> float:
        """Training time so far, summed over the runs this backup resumed."""
        return self._seconds_before + (time.monotonic() - self._begin if self._begin is not None else 0.0)

    def on_train_begin(self, logs=None):
        self._begin = time.monotonic()
        state_path = self.directory / self.STATE
        if not state_path.exists():
            return
        state = self._state(state_path)
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
                    best = [f[f"arr_{i}"] for i in range(len([k for k in f.files if k.startswith("arr_")]))]
                    record = f[kernel_storage.RECORD] if kernel_storage.RECORD in f.files else None
                # Saved with the MADEs' kernels stored otherwise (by "auto" on another kind
                # of device, say), it holds them in the storage its record names.
                self.stopper.best_weights = kernel_storage.weights_list(self.model, best, record)
        self.resumed_from = state["epoch"]

    def on_epoch_end(self, epoch, logs=None):
        self.directory.mkdir(parents=True, exist_ok=True)
        tag = f"epoch-{epoch + 1}"
        state = {"epoch": epoch + 1, "weights": f"{tag}.weights.h5", "seconds": round(self.seconds, 1)}
        self.model.save_weights(self.directory / state["weights"], overwrite=True)
        if self.stopper is not None:
            saved = {"best": log_scalar(self.stopper.best), "wait": int(self.stopper.wait),
                     "best_epoch": int(self.stopper.best_epoch), "best_weights": None}
            if self.stopper.best_weights is not None:
                # Named by the best epoch: written once when it changes, not every epoch.
                saved["best_weights"] = f"best-{saved['best_epoch'] + 1}.npz"
                if not (self.directory / saved["best_weights"]).exists():
                    _save_atomically(self.directory / saved["best_weights"], self.stopper.best_weights,
                                     kernel_storage.storage_record(self.model))
            state["stopper"] = saved
        write_atomically(self.directory / self.STATE, json.dumps(state, indent=2))
        keep = {self.STATE, state["weights"], state.get("stopper", {}).get("best_weights")}
        for path in self.directory.iterdir():
            if path.name not in keep:
                path.unlink()


def log_scalar(value) -> float:
    """A loss Keras logged, as a float: multi-worker logs are vectors of one."""
    return float(np.mean(value))


def _save_atomically(path: Path, arrays, record) -> None:
    # A kill mid-write must not leave a file that "exists" but is partial.
    partial = path.with_name(path.name + ".partial.npz")
    np.savez(partial, *arrays, **{kernel_storage.RECORD: record})
    os.replace(partial, path)


def write_atomically(path: Path, text: str) -> None:
    """Writes ``text`` to ``path`` so that a kill mid-write leaves the previous file whole."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    os.replace(partial, path)  # atomic on POSIX and Windows
