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

    Attributes:
      name: the dataset's name (``"power"``, ...).
      x_train: the training rows ``[N_train, D]``.
      x_val: the validation rows (early stopping).
      x_test: the test rows.
      y_train: one-hot labels of the training rows, or None.
      y_val: of the validation rows, or None.
      y_test: of the test rows, or None.
      num_classes: the number of classes of labelled data, or None.
      logit_lambda: the logit transform's lambda of image data, or None.

    Raises:
      ValueError: at construction, if a split is not a matrix with rows and
        columns, holds a non-finite value, or has a label count other than its
        row count.

    Example:

    >>> import numpy as np
    >>> x = np.zeros((10, 3), np.float32)
    >>> splits = Splits("zeros", x, x[:2], x[:4])
    >>> splits.event_size, splits.sizes, splits.y_train is None
    (3, (10, 2, 4), True)
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
        """``D``, the number of columns."""
        return int(self.x_train.shape[1])

    @property
    def sizes(self) -> tuple[int, int, int]:
        """The rows of the training, validation and test splits."""
        return len(self.x_train), len(self.x_val), len(self.x_test)

    def labels(self, split: str) -> np.ndarray:
        """Integer labels of ``split`` ('train', 'val' or 'test').

        Args:
          split: ``"train"``, ``"val"`` or ``"test"``.

        Returns:
          An int array ``[N]``: the argmax of each one-hot row.

        Raises:
          ValueError: if the dataset has no labels.

        Example:

        >>> import numpy as np
        >>> x, y = np.zeros((3, 2), np.float32), np.eye(3, dtype=np.float32)
        >>> Splits("toy", x, x, x, y, y, y, num_classes=3).labels("test").tolist()
        [0, 1, 2]
        """
        y = getattr(self, f"y_{split}")
        if y is None:
            raise ValueError(f"{self.name} has no labels.")
        return np.argmax(y, axis=1)

    def pipelines(self, batch_size: int = 100, eval_batch_size: int = 10_000, seed: int = 0,
                  conditional: bool = False):
        """The ``tf.data`` datasets of the three splits: `make_pipelines` of these arrays.

        Args:
          batch_size: rows per training batch (100 in the paper).
          eval_batch_size: rows per validation and test batch.
          seed: the training shuffle's seed.
          conditional: yield ``(x, y)`` instead of ``x``, for a conditional model.

        Returns:
          `keras_models.data.Pipelines`: ``train`` (shuffled anew each epoch),
          ``validation``, ``test`` and the shuffle counter ``epoch``.

        Raises:
          ValueError: if ``conditional`` and the data have no labels.

        Example:

        >>> import numpy as np
        >>> x = np.zeros((250, 3), np.float32)
        >>> pipes = Splits("zeros", x, x[:50], x[:50]).pipelines(batch_size=100)
        >>> [b.shape[0] for b in pipes.train], int(pipes.epoch.numpy())  # one pass read
        ([100, 100, 50], 1)
        """
        from keras_models.data.pipeline import make_pipelines

        return make_pipelines(self, batch_size, eval_batch_size, seed, conditional)


def tail_split(data: np.ndarray, fraction: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """``(head, tail)`` with the last ``int(fraction * N)`` rows as the tail, the
    published loaders' rule for every held-out split (test, then validation).

    Example:

    >>> head, tail = tail_split(np.arange(20).reshape(10, 2))
    >>> head.shape, tail.tolist()
    ((9, 2), [[18, 19]])
    """
    n_tail = int(fraction * data.shape[0])
    return data[: data.shape[0] - n_tail], data[data.shape[0] - n_tail :]


def standardize(*arrays: np.ndarray, stats_from: np.ndarray, ddof: int = 0) -> list[np.ndarray]:
    """``(a - mean) / std`` for each array, with per-column statistics of ``stats_from``.

    ``ddof=0`` is NumPy's default (POWER, MINIBOONE), ``ddof=1`` pandas' (GAS, HEPMASS).

    Example:

    >>> train = np.array([[0.0], [2.0]])
    >>> [a.tolist() for a in standardize(train, np.array([[4.0]]), stats_from=train)]
    [[[-1.0], [1.0]], [[3.0]]]
    """
    mu = stats_from.mean(axis=0)
    s = stats_from.std(axis=0, ddof=ddof)
    constant = np.flatnonzero(s == 0)  # (a NaN in the data: reported later, by row)
    if constant.size:  # (a - mu) / 0: every row non-finite, blamed later on a damaged file
        raise ValueError(f"expected columns that vary over the training rows, got {constant.size} constant "
                         f"(column {', '.join(map(str, constant[:5]))}{', ...' if constant.size > 5 else ''}): "
                         "they cannot be standardised.")
    return [(a - mu) / s for a in arrays]
