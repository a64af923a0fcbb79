"""Training data checked at the door of ``fit``, and the statistics a flow standardises with.

A table of a user's own goes wrong in ways the paper's preprocessed datasets never do,
and each ruins a model without a word: one NaN row makes every weight NaN; a constant
column, or one that repeats another, has no density (the flow drives it to a point and
its loss falls without end); integer-valued columns give a density of spikes. Before
training, `check_training_data` reads the rows once, batch by batch as they come
(arrays in parts, a `tf.data` pipeline as it streams), and

- refuses non-finite rows of ``x`` or ``y``, naming how many and the first few;
- refuses constant columns of ``x`` and columns that repeat another, naming them;
- warns of integer-valued columns of ``x``, naming them, where the model does not
  dequantize them (a flow's ``dequantize`` keyword adds uniform noise in training, as
  the paper does for pixels);

and gives each column's mean and standard deviation, which the same pass computes
(float64, Chan et al.'s pairwise update), for a flow's `tfp_maf.layers.Standardization`.

Example:

>>> import numpy as np
>>> x = np.random.default_rng(0).normal(size=(100, 3))
>>> x[7, 1] = np.nan
>>> survey_columns(x).problems()[0]
'x has 1 non-finite row (NaN or infinity) of 100: row 7'
>>> x[7, 1], x[:, 2] = 0.0, 5.0
>>> survey_columns(x).problems()
['x has a constant column: column 2 (every row 5)']
"""

from __future__ import annotations

import hashlib
import math
import warnings
from collections import defaultdict

import numpy as np
import tensorflow as tf

from keras_models._checks import unpack
from keras_models.streamed_rows import Moments

__all__ = ["ColumnSurvey", "IntegerColumnsWarning", "check_training_data", "survey_columns"]

#: Rows read at once from arrays (the checks' temporary memory is a few copies of a part).
PART_ROWS = 8192
#: Non-finite rows and columns named in a message; the rest are counted.
NAMED = 5


class IntegerColumnsWarning(UserWarning):
    """Columns of integer values: a continuous density of them is a set of spikes."""


class ColumnSurvey:
    """What one pass over a table's rows, batch by batch, finds of its columns.

    Args:
      name: what the table is called in messages (``"x"``, ``"y"``).
      columns: the column names for messages (a run's file columns), or None:
        ``column i``.
      row_base: the number messages give the first row (0: an array's index; 1: a
        file's first data row).
    """

    def __init__(self, name: str = "x", columns=None, row_base: int = 0):
        self.name, self.columns, self.row_base = name, None if columns is None else list(columns), row_base
        self.rows, self.moments = 0, Moments()
        self.bad_rows, self.bad_count = [], 0
        self.low = self.high = self.integer = None
        self.duplicates = None  # candidate pairs (i, j), i < j, equal in every batch so far

    def add(self, batch) -> None:
        """Reads ``batch`` ``[n, D]`` (rows in order after those already read)."""
        batch = np.asarray(batch)
        batch = batch.reshape(len(batch), -1) if batch.ndim != 2 else batch
        finite = np.isfinite(batch).all(axis=1)
        if not finite.all():
            bad = np.flatnonzero(~finite)
            self.bad_count += len(bad)
            self.bad_rows += (bad[: NAMED - len(self.bad_rows)] + self.rows).tolist()
            batch = batch[finite]
        self.rows += len(finite)
        if not len(batch):
            return
        wide = batch.astype(np.float64)
        mean = wide.mean(axis=0)
        self.moments.add(len(wide), mean, ((wide - mean) ** 2).sum(axis=0))
        low, high = batch.min(axis=0), batch.max(axis=0)
        integer = np.all(batch == np.round(batch), axis=0)
        if self.low is None:
            self.low, self.high, self.integer = low, high, integer
            self.duplicates = _equal_pairs(batch)
        else:
            self.low, self.high = np.minimum(self.low, low), np.maximum(self.high, high)
            self.integer &= integer
            self.duplicates = [(i, j) for i, j in self.duplicates if np.array_equal(batch[:, i], batch[:, j])]

    def _column(self, i: int) -> str:
        return f"column {i}" if self.columns is None else repr(self.columns[i])

    def listed(self, indices) -> str:
        """The columns ``indices`` by name, the first few, for a message."""
        named = ", ".join(self._column(i) for i in indices[:NAMED])
        return named + (f" and {len(indices) - NAMED} more" if len(indices) > NAMED else "")

    def problems(self, columns_checked: bool = True) -> list[str]:
        """What makes the table unfit to train on, one sentence each (empty if none):
        non-finite rows, and, where ``columns_checked``, constant and repeated columns."""
        out = []
        if self.bad_count:
            rows = ", ".join(str(r + self.row_base) for r in self.bad_rows)
            more = f" and {self.bad_count - len(self.bad_rows)} more" if self.bad_count > len(self.bad_rows) else ""
            out.append(f"{self.name} has {self.bad_count} non-finite row{'s' * (self.bad_count > 1)} "
                       f"(NaN or infinity) of {self.rows}: row{'s' * (self.bad_count > 1)} {rows}{more}")
        if not columns_checked or self.low is None:
            return out
        constant = np.flatnonzero(self.low == self.high).tolist()
        if constant:
            values = "" if len(constant) > 1 else f" (every row {float(self.low[constant[0]]):g})"
            out.append(f"{self.name} has {'a constant column' if len(constant) == 1 else 'constant columns'}: "
                       f"{self.listed(constant)}{values}")
        repeated = [(i, j) for i, j in self.duplicates if i not in constant]
        if repeated:
            pairs = ", ".join(f"{self._column(j)} repeats {self._column(i)}" for i, j in repeated[:NAMED])
            out.append(f"{self.name} has columns that repeat another: {pairs}")
        return out

    def integer_columns(self) -> list[int]:
        """The columns every finite row of which holds an integer value (constant ones aside)."""
        if self.integer is None:
            return []
        return np.flatnonzero(self.integer & (self.low != self.high)).tolist()

    def loc_and_scale(self) -> tuple[np.ndarray, np.ndarray]:
        """Each column's mean and standard deviation (1 where a column is constant)."""
        scale = np.sqrt(self.moments.variance)
        return np.asarray(self.moments.mean, np.float64), np.where(scale > 0, scale, 1.0)


def _equal_pairs(batch) -> list[tuple[int, int]]:
    """The pairs of columns of ``batch`` that are equal, by a hash of each column."""
    groups = defaultdict(list)
    for i, column in enumerate(np.ascontiguousarray(batch.T)):
        groups[hashlib.blake2b(column.tobytes(), digest_size=16).digest()].append(i)
    return [(g[0], j) for g in groups.values() if len(g) > 1 for j in g[1:]]


def survey_columns(x, name: str = "x", columns=None, row_base: int = 0) -> ColumnSurvey:
    """A `ColumnSurvey` of the array ``x`` ``[N, D]``, read in parts of `PART_ROWS` rows."""
    survey = ColumnSurvey(name, columns, row_base)
    x = np.asarray(x)
    for start in range(0, max(len(x), 1), PART_ROWS):
        if len(x):
            survey.add(x[start:start + PART_ROWS])
    return survey


def check_training_data(model, given: dict, stream: bool = True) -> tuple[ColumnSurvey, ColumnSurvey | None] | None:
    """Checks the training data of a ``fit`` (its keywords by name), and returns the
    surveys of ``x`` and ``y``; None where the data is neither arrays nor a `tf.data`
    dataset (a generator or `keras.utils.PyDataset`, which one pass would consume), or
    is a dataset and ``stream`` is False.

    A dataset is read by a pass of its own (as it streams, in batches) where ``stream``:
    ``fit`` asks for one where a flow needs its standardisation statistics. Otherwise
    its rows are checked by the training step itself: a step whose loss is not finite
    (a NaN row, say) updates from zero gradients and stops ``fit``
    (`keras_models.keras_loop.NonFiniteGuard`).

    Raises:
      ValueError: naming every problem `ColumnSurvey.problems` finds, or for a
        `tf.data` dataset of unknown end without ``steps_per_epoch``.
    """
    x = given.get("x")
    if isinstance(x, tf.data.Dataset):
        if not stream:
            return None
        surveys = _survey_dataset(model, x, given.get("steps_per_epoch"))
    elif hasattr(x, "shape") or isinstance(x, (list, tuple)):
        xs, ys, _ = unpack(x) if given.get("y") is None and isinstance(x, (tuple, list)) else (x, given.get("y"), None)
        xs = np.asarray(xs)
        if xs.ndim != 2 or not np.issubdtype(xs.dtype, np.floating):
            return None  # the width and dtype checks of fit say what is wrong
        rows = math.floor(len(xs) * (1.0 - (given.get("validation_split") or 0.0)))  # as Keras splits
        surveys = (survey_columns(xs[:rows], "x"),
                   None if ys is None or not hasattr(np.asarray(ys), "shape") else survey_columns(
                       np.asarray(ys)[:rows], "y"))
    else:
        return None
    problems = surveys[0].problems() + ([] if surveys[1] is None else surveys[1].problems(columns_checked=False))
    if problems:
        raise ValueError(f"{model.name}: fit refuses this training data: " + "; ".join(problems) + ". "
                         "Drop or repair those rows and columns before training.")
    integer = [i for i in surveys[0].integer_columns() if i not in set(getattr(model, "dequantize", None) or ())]
    if integer:
        warnings.warn(
            f"{model.name}: x has integer-valued columns: {surveys[0].listed(integer)}. A continuous density of "
            f"integers is a set of spikes; pass dequantize={integer[:8]}{'...' if len(integer) > 8 else ''} to the "
            "model to add uniform noise to them in training, as the paper does for pixels.",
            IntegerColumnsWarning, stacklevel=4)
    return surveys


def _survey_dataset(model, dataset, steps):
    """Surveys of a dataset's ``x`` and ``y``, read as it streams (``steps`` batches where
    its end is unknown)."""
    if dataset.cardinality() == tf.data.INFINITE_CARDINALITY:
        if not steps:
            raise ValueError(f"{model.name}: fit got a tf.data.Dataset without end and no steps_per_epoch.")
        dataset = dataset.take(steps)
    xs, ys = ColumnSurvey("x"), ColumnSurvey("y")
    conditional = False
    for element in dataset:
        x, y, _ = unpack(element)
        xs.add(np.asarray(x))
        if y is not None:
            conditional = True
            ys.add(np.asarray(y))
    return xs, ys if conditional else None
