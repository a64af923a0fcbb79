"""The result of every loader: train / validation / test arrays, plus what evaluation needs."""

from __future__ import annotations

import dataclasses

import numpy as np

from keras_models.data._files import check_finite

__all__ = ["Splits", "standardize", "tail_split"]


@dataclasses.dataclass(frozen=True)
class Splits:
    """A preprocessed dataset. ``x_*`` are float32 matrices ``[N, D]``; ``y_*`` one-hot float32
    labels ``[N, num_classes]`` for labelled data, else None. ``logit_lambda`` is the
    lambda of the logit transform of image data (for bits per pixel), else None.

    ``x_train`` is the whole training set as an array, for batch-norm statistics and the
    closed-form Gaussian; ``pipelines`` gives the ``tf.data`` view of the same arrays.
    """

    name: str
    x_train: np.ndarray
    x_val: np.ndarray
    x_test: np.ndarray
    y_train: np.ndarray | None = None
    y_val: np.ndarray | None = None
    y_test: np.ndarray | None = None
    num_classes: int | None = None
    logit_lambda: float | None = None

    def __post_init__(self):
        for split in ("train", "val", "test"):
            x = getattr(self, f"x_{split}")
            y = getattr(self, f"y_{split}")
            check_finite(x, f"{self.name} {split} split")
            if x.ndim != 2 or x.shape[0] == 0 or x.shape[1] == 0:
                raise ValueError(
                    f"{self.name} {split} split: expected a matrix with some rows and columns, "
                    f"got shape {x.shape}."
                )
            if y is not None and len(y) != len(x):
                raise ValueError(
                    f"{self.name} {split} split: expected one label per row ({len(x)}), got {len(y)}."
                )

    @property
    def event_size(self) -> int:
        return int(self.x_train.shape[1])

    @property
    def sizes(self) -> tuple[int, int, int]:
        return len(self.x_train), len(self.x_val), len(self.x_test)

    def labels(self, split: str) -> np.ndarray:
        """Integer labels of ``split`` ('train', 'val' or 'test')."""
        y = getattr(self, f"y_{split}")
        if y is None:
            raise ValueError(f"{self.name} has no labels.")
        return np.argmax(y, axis=1)

    def pipelines(self, batch_size: int = 100, eval_batch_size: int = 10_000, seed: int = 0,
                  conditional: bool = False):
        """``(train, validation, test)`` ``tf.data`` datasets; see ``pipeline.make_pipelines``."""
        from keras_models.data.pipeline import make_pipelines

        return make_pipelines(self, batch_size, eval_batch_size, seed, conditional)


def tail_split(data: np.ndarray, fraction: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """``(head, tail)`` with the last ``int(fraction * N)`` rows as the tail, the
    published loaders' rule for every held-out split (test, then validation)."""
    n_tail = int(fraction * data.shape[0])
    return data[: data.shape[0] - n_tail], data[data.shape[0] - n_tail :]


def standardize(*arrays: np.ndarray, stats_from: np.ndarray, ddof: int = 0) -> list[np.ndarray]:
    """``(a - mean) / std`` for each array, with per-column statistics of ``stats_from``.

    ``ddof=0`` is NumPy's default (POWER, MINIBOONE), ``ddof=1`` pandas' (GAS, HEPMASS).
    """
    mu = stats_from.mean(axis=0)
    s = stats_from.std(axis=0, ddof=ddof)
    return [(a - mu) / s for a in arrays]
