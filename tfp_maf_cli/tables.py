"""A user's table for the ``tfp-maf`` command: read from a CSV, Parquet or NumPy file,
its columns chosen, checked and split. Imports no TensorFlow.

| file | read as |
|---|---|
| ``.csv`` | a header row of column names, then one row of numbers per line (Python's csv) |
| ``.parquet`` | its numeric columns (pyarrow, ``pip install pyarrow``) |
| ``.npy`` | a 2-D array; its columns are named ``"0"``, ``"1"``, ... |
| ``.npz`` | one 2-D array (columns ``"0"``, ``"1"``, ...), or 1-D arrays of one length, a column each by its key |

Every error is one line that names the file, and the row or column at fault.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

__all__ = ["FORMATS", "Table", "read_table", "split_rows"]

FORMATS = (".csv", ".parquet", ".npy", ".npz")


class Table:
    """Named numeric columns of a file: ``names``, ``values`` ``[N, C]`` float64, and
    ``dtypes``, each column's type in the file."""

    def __init__(self, path, names, values, dtypes):
        self.path, self.names, self.values, self.dtypes = str(path), list(names), values, list(dtypes)

    def columns(self, wanted, role: str) -> np.ndarray:
        """The columns named ``wanted``, in that order ``[N, len(wanted)]``; a name the file
        lacks is refused, naming it and the file's columns."""
        missing = [name for name in wanted if name not in self.names]
        if missing:
            raise ValueError(f"{self.path} has no column{'s' * (len(missing) > 1)} {', '.join(map(repr, missing))} "
                             f"({role}); its columns: {', '.join(map(repr, self.names))}.")
        index = [self.names.index(name) for name in wanted]
        return self.values[:, index]


def read_table(path) -> Table:
    """The numeric table in ``path`` (see the module docstring for the formats).

    Raises:
      ValueError: for an unknown extension, an empty file, a cell that is not a number
        (naming its row and column), repeated column names, or rows of unequal length.
      OSError: where the file cannot be read.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in FORMATS:
        raise ValueError(f"--data {path}: expected a file ending {', '.join(FORMATS)}, "
                         f"got {suffix or 'no extension'!r}.")
    if not path.is_file():
        raise ValueError(f"--data {path}: no such file.")
    names, values, dtypes = {".csv": _read_csv, ".parquet": _read_parquet, ".npy": _read_npy,
                             ".npz": _read_npz}[suffix](path)
    if len(set(names)) != len(names):
        repeated = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"{path}: column names repeat: {', '.join(map(repr, repeated))}.")
    if values.shape[0] == 0 or values.shape[1] == 0:
        raise ValueError(f"{path}: expected rows and columns, got {values.shape[0]} rows of {values.shape[1]} columns.")
    return Table(path, names, values, dtypes)


def _read_csv(path):
    with open(path, newline="") as handle:
        reader = csv.reader(handle)
        try:
            names = [name.strip() for name in next(reader)]
        except StopIteration:
            raise ValueError(f"{path}: the file is empty; expected a header row of column names.") from None
        rows = []
        for line, row in enumerate(reader, start=2):
            if not row:
                continue
            if len(row) != len(names):
                raise ValueError(f"{path}, line {line}: expected {len(names)} cells (the header's), got {len(row)}.")
            try:
                rows.append([float(cell) for cell in row])
            except ValueError:
                cell = next(c for c in row if not _is_number(c))
                column = names[row.index(cell)]
                raise ValueError(f"{path}, line {line}, column {column!r}: {cell!r} is not a number.") from None
    if names and all(_is_number(name) for name in names):
        raise ValueError(f"{path}: the first line holds numbers; expected a header row of column names.")
    return names, np.asarray(rows, np.float64).reshape(len(rows), len(names)), ["float64"] * len(names)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _read_parquet(path):
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ValueError(f"{path}: reading Parquet needs pyarrow (pip install pyarrow).") from None
    table = pq.read_table(path)
    names, columns, dtypes = [], [], []
    for name, column in zip(table.column_names, table.columns, strict=True):
        values = column.to_numpy(zero_copy_only=False)
        if not (np.issubdtype(values.dtype, np.number) or values.dtype == bool):
            raise ValueError(f"{path}, column {name!r}: expected numbers, got {column.type}.")
        names.append(str(name))
        columns.append(values.astype(np.float64))
        dtypes.append(str(column.type))
    return names, np.stack(columns, axis=1) if columns else np.zeros((0, 0)), dtypes


def _array(path, values, key=None):
    where = f"{path}" + (f"[{key!r}]" if key else "")
    if not (np.issubdtype(values.dtype, np.number) or values.dtype == bool):
        raise ValueError(f"{where}: expected numbers, got dtype {values.dtype}.")
    return values.astype(np.float64)


def _read_npy(path):
    values = np.load(path, allow_pickle=False)
    if values.ndim != 2:
        raise ValueError(f"{path}: expected a 2-D array (rows x columns), got shape {list(values.shape)}.")
    return [str(i) for i in range(values.shape[1])], _array(path, values), [str(values.dtype)] * values.shape[1]


def _read_npz(path):
    with np.load(path, allow_pickle=False) as arrays:
        items = {key: arrays[key] for key in arrays.files}
    if len(items) == 1 and next(iter(items.values())).ndim == 2:
        key, values = next(iter(items.items()))
        names = [str(i) for i in range(values.shape[1])]
        return names, _array(path, values, key), [str(values.dtype)] * values.shape[1]
    lengths = {key: len(v) for key, v in items.items() if v.ndim == 1}
    if not items or len(lengths) != len(items) or len(set(lengths.values())) != 1:
        shapes = ", ".join(f"{k!r} {list(v.shape)}" for k, v in items.items())
        raise ValueError(f"{path}: expected one 2-D array, or 1-D arrays of one length (a column each); "
                         f"got {shapes or 'no arrays'}.")
    return (list(items), np.stack([_array(path, v, k) for k, v in items.items()], axis=1),
            [str(v.dtype) for v in items.values()])


def split_rows(rows: int, fractions, seed: int):
    """Row indices of a seeded train / validation / test split: ``fractions`` the
    validation and test shares; each split gets at least one row."""
    validation, test = fractions
    if not (0 < validation < 1 and 0 < test < 1 and validation + test < 1):
        raise ValueError(f"--split: expected validation and test fractions in (0, 1) adding to under 1, "
                         f"got {validation} and {test}.")
    if rows < 3:
        raise ValueError(f"expected at least 3 rows to split into training, validation and test rows, got {rows}.")
    order = np.random.default_rng(seed).permutation(rows)
    n_val, n_test = max(1, math.floor(rows * validation)), max(1, math.floor(rows * test))
    return order[n_val + n_test:], order[:n_val], order[n_val:n_val + n_test]
