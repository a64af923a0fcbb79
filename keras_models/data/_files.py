"""Where the benchmark files live, and the errors users see when they are not right.

The layout is the one of the public MAF benchmark archive, ``<root>/<dataset>/<file>``.
The root is, in order: the ``data_dir`` argument (``--data-dir`` on the command line),
the ``TFP_MAF_DATA`` environment variable, and ``~/.tfp_maf/data``.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import numpy as np

__all__ = [
    "DATA_ENV",
    "DatasetFileNotFoundError",
    "SOURCES",
    "check_finite",
    "check_width",
    "data_root",
    "dataset_file",
]

DATA_ENV = "TFP_MAF_DATA"
DEFAULT_ROOT = Path("~/.tfp_maf/data")

_ARCHIVE = (
    "the MAF benchmark archive (Papamakarios et al. 2017), https://zenodo.org/record/1161203 "
    "(data.tar.gz): unpack it and point the data root at the folder that holds power/, gas/, "
    "hepmass/, miniboone/ and BSDS300/"
)

#: Where each dataset's files come from, quoted in the missing-file error.
SOURCES = {
    "power": _ARCHIVE,
    "gas": _ARCHIVE,
    "hepmass": _ARCHIVE,
    "miniboone": _ARCHIVE,
    "bsds300": _ARCHIVE,
    "mnist": (
        "the classic pickle mnist.pkl.gz (50,000 / 10,000 / 10,000 rows, pixels = byte / 256), "
        "also in the MAF benchmark archive, https://zenodo.org/record/1161203; or pass "
        "source='tfds' to use an already prepared tfds 'mnist'"
    ),
    "cifar10": (
        "the CIFAR-10 python version, https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz "
        "(unpack the batches into <root>/cifar10/); or pass source='tfds' to use an already "
        "prepared tfds 'cifar10'"
    ),
}


class DatasetFileNotFoundError(FileNotFoundError):
    """A benchmark file is missing; the message says where it was looked for and where it
    comes from."""


def data_root(data_dir: str | os.PathLike | None = None) -> Path:
    """The data root: ``data_dir``, else ``$TFP_MAF_DATA``, else ``~/.tfp_maf/data``.

    Args:
      data_dir: a directory, or None.

    Returns:
      The root as a `pathlib.Path`, ``~`` expanded.

    Example:

    >>> data_root("datasets").name
    'datasets'
    """
    if data_dir is not None:
        return Path(data_dir).expanduser()
    if os.environ.get(DATA_ENV):
        return Path(os.environ[DATA_ENV]).expanduser()
    return DEFAULT_ROOT.expanduser()


def dataset_file(root: Path, dataset: str, folder: str, filename: str) -> Path:
    """``<root>/<folder>/<filename>``, or a DatasetFileNotFoundError naming the file, the
    expected layout and where the file comes from."""
    path = Path(root) / folder / filename
    if not path.is_file():
        raise DatasetFileNotFoundError(
            f"{dataset}: file not found: {path}. Expected the layout <root>/{folder}/{filename} "
            f"with <root> = {root} (set by data_dir / --data-dir, else ${DATA_ENV}, else "
            f"{DEFAULT_ROOT}). The file comes from {SOURCES[dataset]}."
        )
    return path


@contextlib.contextmanager
def reading(path: Path, dataset: str, kind: str):
    """Turns whatever a truncated or corrupt file makes a reader raise (EOFError,
    UnpicklingError, OSError, a reshape ValueError, ...) into one ValueError that
    names the file, what it should have been and where to get it again."""
    try:
        yield
    except Exception as err:
        raise ValueError(
            f"{dataset}: could not read {path} as {kind} ({type(err).__name__}: {err}). "
            f"The file is truncated or corrupt: download it again from {SOURCES[dataset]}."
        ) from err


def check_width(array: np.ndarray, width: int, what: str) -> None:
    """ValueError unless ``array`` is a matrix with ``width`` columns and some rows."""
    if array.ndim != 2 or array.shape[1] != width:
        raise ValueError(f"{what}: expected a matrix with {width} columns, got shape {array.shape}.")
    if len(array) == 0:
        raise ValueError(f"{what}: expected rows of data, got none (shape {array.shape}).")


def check_finite(array: np.ndarray, what: str) -> None:
    """ValueError if any value is NaN or infinite: they would only come back as NaN losses."""
    bad = ~np.isfinite(array)
    if bad.any():
        rows = np.flatnonzero(bad.reshape(len(array), -1).any(axis=1))
        raise ValueError(
            f"{what}: {len(rows)} rows hold non-finite values (first at row {rows[0]}); "
            "expected finite numbers. The file is damaged or not the published one."
        )
