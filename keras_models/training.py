"""Training as in the paper: Adam, minibatch 100, L2 1e-6, early stopping (patience 30)."""

from __future__ import annotations

import time

import keras
import numpy as np

from keras_models.density_model import DensityModel
from keras_models.zoo import LEARNING_RATES, Gaussian

__all__ = ["BatchNormStatistics", "TimeBudget", "compile_as_paper", "fit_as_paper"]


class BatchNormStatistics(keras.callbacks.Callback):
    """Sets batch-norm statistics from the whole training set before each
    validation and at the end of training (appendix B of the paper)."""

    def __init__(self, x_train, y_train=None):
        super().__init__()
        self.x_train, self.y_train = x_train, y_train

    def _update(self):
        self.model.set_batch_norm_statistics(self.x_train, self.y_train)

    def on_test_begin(self, logs=None):
        self._update()

    def on_train_end(self, logs=None):
        # Runs after EarlyStopping restored the best weights (callbacks run in order).
        self._update()


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


def compile_as_paper(model: DensityModel, model_name: str = "maf5", jit_compile=True,
                     steps_per_execution: int = 10) -> DensityModel:
    """Adam with the paper's step size for this model (1e-3 MADE / MADE MoG, 1e-4 flows).

    XLA by default: it fuses Keras 3's per-variable optimizer ops and the small
    elementwise ops of the flows, about 1.5x faster training at batch 100 on CPU
    (``benchmarks/speed.py``; at batch 1,000 XLA's matmuls make it no faster);
    ``jit_compile=False`` turns it off.
    """
    model.compile(
        optimizer=keras.optimizers.Adam(LEARNING_RATES.get(model_name, 1e-4)),
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
):
    """Trains until the validation log-likelihood has not improved for
    ``patience`` epochs, restores the best weights, and sets the batch-norm
    statistics. Returns ``(history, info)``; ``info`` says whether early
    stopping was reached and how many epochs ran."""
    if isinstance(model, Gaussian):
        model.fit_closed_form(x_train, y_train)
        return None, {"epochs": 0, "early_stopped": True, "closed_form": True}
    stopper = keras.callbacks.EarlyStopping(
        monitor="val_loss", patience=patience, restore_best_weights=True
    )
    budget = TimeBudget(max_minutes) if max_minutes else None
    all_callbacks = [*callbacks, stopper] + ([budget] if budget else [])
    all_callbacks.append(BatchNormStatistics(x_train, y_train))
    history = model.fit(
        train_ds, validation_data=val_ds, epochs=max_epochs, callbacks=all_callbacks, verbose=verbose,
        shuffle=False,  # the pipeline shuffles (a fresh permutation each epoch)
    )
    epochs = len(history.history["loss"])
    return history, {
        "epochs": epochs,
        "early_stopped": bool(stopper.stopped_epoch) and epochs < max_epochs and not (budget and budget.stopped),
        "best_val_loss": float(np.min(history.history["val_loss"])),
    }
