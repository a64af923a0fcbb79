"""What a person running ``tfp-maf train`` sees: progress, best so far, time left.

On a terminal: a bar within each epoch, redrawn in place, then one line per epoch.
Elsewhere (a log file, CI): the per-epoch line only. Written to stderr, so that the
command's JSON result on stdout stays machine-readable.
"""

from __future__ import annotations

import math
import sys
import time

import keras

__all__ = ["TrainingProgress"]

BAR_WIDTH = 24


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class TrainingProgress(keras.callbacks.Callback):
    """Per-epoch progress of an early-stopped run.

    Each epoch ends with a line such as::

        epoch 12/1000  loss 3.541  val_loss 3.562  best 3.550 (epoch 9)  0:42 elapsed, at most 2:05 left

    A validation loss that is not finite (some validation rows at zero density) is
    counted on each line from its first occurrence, and the run ends with what to do.

    "At most" is when training stops if the validation loss does not improve again:
    early stopping's remaining patience, the epoch cap and the time budget, whichever
    comes first, at the mean epoch time so far.

    Args:
      max_epochs: the epoch cap.
      patience: early stopping's patience (epochs without improvement).
      max_minutes: the time budget, if any.
      stream: where to write (default ``sys.stderr``).
      bar: draw the within-epoch bar (default: when ``stream`` is a terminal).

    Attributes:
      stopper: the run's `keras.callbacks.EarlyStopping`, if any (`fit_as_paper` sets
        it): its best, restored by a resumed run, counts as well as the epochs seen here.
    """

    def __init__(self, max_epochs: int, patience: int, max_minutes: float | None = None, stream=None,
                 bar: bool | None = None):
        super().__init__()
        self.max_epochs, self.patience, self.max_minutes = max_epochs, patience, max_minutes
        self.stream = stream or sys.stderr
        self.bar = self.stream.isatty() if bar is None else bar
        self.stopper = None

    def on_train_begin(self, logs=None):
        steps = (self.params or {}).get("steps")
        per_epoch = f", {steps} steps per epoch" if steps else ""
        self.stream.write(
            f"training {self.model.name}: {self.model.count_params():,} parameters{per_epoch} "
            "(the first epoch includes compiling)\n"
        )
        self.stream.flush()
        self.start = time.monotonic()
        self.epochs_run = 0
        self.best, self.best_epoch = math.inf, None
        self.non_finite_epochs = 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch
        self.epoch_start = time.monotonic()

    def on_train_batch_end(self, batch, logs=None):
        steps = (self.params or {}).get("steps")
        if not self.bar or not steps:
            return
        done = min(batch + 1, steps)
        filled = BAR_WIDTH * done // steps
        loss = (logs or {}).get("loss")
        loss_text = "" if loss is None else f"  loss {float(loss):.4g}"
        self.stream.write(
            f"\repoch {self.epoch + 1}/{self.max_epochs} [{'#' * filled}{'.' * (BAR_WIDTH - filled)}] "
            f"{done}/{steps}{loss_text}  {_clock(time.monotonic() - self.epoch_start)}"
        )
        self.stream.flush()

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        self.epochs_run += 1
        stopper = self.stopper
        if stopper is not None and stopper.best is not None and float(stopper.best) < self.best:
            self.best, self.best_epoch = float(stopper.best), stopper.best_epoch  # before a resume
        val = logs.get("val_loss")
        if val is not None and float(val) < self.best:
            self.best, self.best_epoch = float(val), epoch
        if val is not None and not math.isfinite(float(val)):
            self.non_finite_epochs += 1
        elapsed = time.monotonic() - self.start
        parts = [f"epoch {epoch + 1}/{self.max_epochs}"]
        parts += [f"{k} {float(logs[k]):.4f}" for k in ("loss", "val_loss") if k in logs]
        if self.non_finite_epochs:
            plural = "s" if self.non_finite_epochs > 1 else ""
            parts[-1] += f" (not finite in {self.non_finite_epochs} epoch{plural} so far)"
        if self.best_epoch is not None:
            parts.append(f"best {self.best:.4f} (epoch {self.best_epoch + 1})")
        parts.append(f"{_clock(elapsed)} elapsed, at most {_clock(self._left(epoch, elapsed))} left")
        self.stream.write(("\r\x1b[K" if self.bar else "") + "  ".join(parts) + "\n")
        self.stream.flush()

    def on_train_end(self, logs=None):
        if self.non_finite_epochs:
            self.stream.write(
                f"the validation loss was not finite in {self.non_finite_epochs} of {self.epochs_run} epochs: "
                "the model put (almost) zero density on some validation rows, as an overfitted flow "
                "with unbounded scales can. Early stopping compares finite losses only, so the "
                "weights kept are those of the best finite epoch. If it happens early or often, "
                "try batch norm, a smaller learning rate, or log_scale_bound=... on the model.\n"
            )
            self.stream.flush()

    def _left(self, epoch: int, elapsed: float) -> float:
        per_epoch = elapsed / self.epochs_run
        epochs_left = self.max_epochs - (epoch + 1)
        if self.best_epoch is not None:
            epochs_left = min(epochs_left, self.patience - (epoch - self.best_epoch))
        left = max(epochs_left, 0) * per_epoch
        if self.max_minutes:
            left = min(left, max(60.0 * self.max_minutes - elapsed, 0.0))
        return left
