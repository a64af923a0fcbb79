"""The four UCI datasets and BSDS300, preprocessed exactly as the paper's published loaders.

Each dataset has a pure ``preprocess_*`` function (arrays or a DataFrame in, three float64
splits out) and a ``load_*`` function that reads the standard file and returns ``Splits``.
Sizes on the real files (appendix D of the paper):

=========  ==  =========  ==========  =======
dataset    D   train      validation  test
=========  ==  =========  ==========  =======
POWER      6   1,659,917  184,435     204,928
GAS        8   852,174    94,685      105,206
HEPMASS    21  315,123    35,013      174,987
MINIBOONE  43  29,556     3,284       3,648
BSDS300    63  1,000,000  50,000      250,000
=========  ==  =========  ==========  =======
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from keras_models._optional import require
from keras_models.data._files import check_width, data_root, dataset_file, reading
from keras_models.data.splits import Splits, standardize, tail_split

__all__ = [
    "GAS_DROPPED",
    "load_bsds300",
    "load_gas",
    "load_hepmass",
    "load_miniboone",
    "load_power",
    "power_noise",
    "preprocess_gas",
    "preprocess_hepmass",
    "preprocess_miniboone",
    "preprocess_power",
]


def _float32_splits(name, train, val, test) -> Splits:
    return Splits(name, *(np.asarray(a, dtype=np.float32) for a in (train, val, test)))


# ----------------------------------------------------------------------------------- POWER

POWER_RAW_COLUMNS = (
    "global_active_power", "global_reactive_power", "voltage", "global_intensity",
    "sub_metering_1", "sub_metering_2", "sub_metering_3", "time_in_minutes",
)
#: Columns of ``power/data.npy`` the published loader deletes (reactive power and intensity).
POWER_DROPPED = (1, 3)


def power_noise(rng: np.random.RandomState, n: int) -> np.ndarray:
    """The published dequantization noise for the six kept POWER columns, drawn in the
    published order (voltage, active power, sub-meterings): U[0, 0.001) on active power,
    U[0, 0.01) on voltage, U[0, 1) on each sub-metering, none on the time of day."""
    voltage = 0.01 * rng.rand(n, 1)
    active_power = 0.001 * rng.rand(n, 1)
    sub_metering = rng.rand(n, 3)
    time = np.zeros((n, 1))
    return np.hstack((active_power, voltage, sub_metering, time))


def preprocess_power(raw: np.ndarray):
    """POWER: seeded shuffle (RandomState(42)), drop global reactive power and global
    intensity, add ``power_noise``, hold out the last 10% as test and the last 10% of the
    rest as validation, standardize with train+validation statistics. D = 6."""
    check_width(raw, len(POWER_RAW_COLUMNS), "POWER power/data.npy")
    rng = np.random.RandomState(42)
    data = np.array(raw, dtype=np.float64)  # a copy: the shuffle is in place
    rng.shuffle(data)
    data = np.delete(data, POWER_DROPPED, axis=1)
    data = data + power_noise(rng, data.shape[0])
    rest, test = tail_split(data)
    train, val = tail_split(rest)
    return standardize(train, val, test, stats_from=rest)


def load_power(data_dir=None) -> Splits:
    """POWER from ``<root>/power/data.npy``; see ``preprocess_power``.

    Args:
      data_dir: the data root (`keras_models.data.data_root`).

    Returns:
      `keras_models.data.Splits` with D = 6.

    Raises:
      DatasetFileNotFoundError: if the file is missing.
      ValueError: if it is unreadable or not an ``[N, 8]`` array.
    """
    path = dataset_file(data_root(data_dir), "power", "power", "data.npy")
    with reading(path, "power", "a NumPy .npy array"):
        raw = np.load(path)
    return _float32_splits("power", *preprocess_power(raw))


# ------------------------------------------------------------------------------------- GAS

#: Columns of ``gas/ethylene_CO.pickle`` that are not sensor readings.
GAS_DROPPED = ("Meth", "Eth", "Time")


def _gas_strongly_correlated(frame) -> np.ndarray:
    """Per column, how many columns (itself included) it is correlated with above 0.98."""
    return (frame.corr() > 0.98).to_numpy().sum(axis=1)


def preprocess_gas(frame):
    """GAS: drop ``Meth``, ``Eth``, ``Time``; while some column is correlated above 0.98
    with another, drop the first such column; standardize with the statistics of the whole
    file (pandas' ``std``, ddof=1); hold out the last 10% as test and the last 10% of the
    rest as validation (no shuffle, as published). D = 8 on the real file."""
    missing = [c for c in GAS_DROPPED if c not in frame.columns]
    if missing:
        raise ValueError(
            f"GAS gas/ethylene_CO.pickle: expected a DataFrame with columns {list(GAS_DROPPED)} "
            f"and the sensor readings, got columns {list(frame.columns)} (missing {missing})."
        )
    frame = frame.drop(columns=list(GAS_DROPPED)).astype(np.float64)
    counts = _gas_strongly_correlated(frame)
    while np.any(counts > 1):
        frame = frame.drop(columns=frame.columns[np.flatnonzero(counts > 1)[0]])
        counts = _gas_strongly_correlated(frame)
    frame = (frame - frame.mean()) / frame.std()
    rest, test = tail_split(frame.to_numpy())
    train, val = tail_split(rest)
    return train, val, test


def load_gas(data_dir=None) -> Splits:
    """GAS from ``<root>/gas/ethylene_CO.pickle`` (a pandas DataFrame); see ``preprocess_gas``.

    Args:
      data_dir: the data root (`keras_models.data.data_root`).

    Returns:
      `keras_models.data.Splits` with D = 8 on the real file.

    Raises:
      DatasetFileNotFoundError: if the file is missing.
      ValueError: if it is unreadable, not a DataFrame, or lacks the columns.
      ImportError: without pandas (the ``paper`` extra).
    """
    pd = require("pandas", "the GAS loader")

    path = dataset_file(data_root(data_dir), "gas", "gas", "ethylene_CO.pickle")
    with reading(path, "gas", "a pickled pandas DataFrame"):
        frame = pd.read_pickle(path)
    if not isinstance(frame, pd.DataFrame):
        raise ValueError(f"GAS {path}: expected a pickled pandas DataFrame, got {type(frame).__name__}.")
    return _float32_splits("gas", *preprocess_gas(frame))


# --------------------------------------------------------------------------------- HEPMASS

def _count_of_smallest_value(column: np.ndarray) -> int:
    # The published loader sorts the value counts by value and takes the first: the
    # count of the SMALLEST value, not the largest count. Kept as published, since it
    # decides which 21 features remain.
    counts = Counter(column.tolist())
    return counts[min(counts)]


def preprocess_hepmass(train_frame, test_frame):
    """HEPMASS: keep the positive class (first column == 1) and drop that label column;
    drop the test file's last column; drop every feature whose smallest training value
    occurs more than 5 times (the published rule); standardize with training statistics
    (pandas' ``std``, ddof=1); the last 10% of train is validation. D = 21 on the
    real files.

    Test columns are matched to training columns by name; a training column the test file
    lacks must be one the repeated-values rule drops.
    """
    for what, frame in (("1000_train.csv", train_frame), ("1000_test.csv", test_frame)):
        labels = frame[frame.columns[0]]
        if not labels.isin([0, 1]).all():
            raise ValueError(
                f"HEPMASS hepmass/{what}: expected the class label (0 or 1) in the first column "
                f"{frame.columns[0]!r}, got values such as {sorted(set(labels.unique()) - {0, 1})[:3]}."
            )
    train = train_frame[train_frame[train_frame.columns[0]] == 1].drop(columns=train_frame.columns[0])
    test = test_frame[test_frame[test_frame.columns[0]] == 1].drop(columns=test_frame.columns[0])
    for what, frame, positive in (("1000_train.csv", train_frame, train), ("1000_test.csv", test_frame, test)):
        if len(positive) == 0:
            raise ValueError(f"HEPMASS hepmass/{what}: expected rows of the positive class (label 1), got none "
                             f"of {len(frame)} rows.")
    test = test.drop(columns=test.columns[-1])
    train = train.astype(np.float64)
    # The rule is applied to the raw values: standardizing maps equal values to equal
    # values and keeps their order, so it selects the same features, and a constant
    # column (std 0) is dropped instead of turning into NaN.
    raw = train.to_numpy()
    keep = [i for i in range(raw.shape[1]) if _count_of_smallest_value(raw[:, i]) <= 5]
    kept_names = list(train.columns[keep])
    absent = [c for c in kept_names if c not in test.columns]
    if absent:
        raise ValueError(
            f"HEPMASS hepmass/1000_test.csv: expected the training features {kept_names}, "
            f"the test file lacks {absent}."
        )
    train = train[kept_names]
    mu, s = train.mean(), train.std()
    train = ((train - mu) / s).to_numpy()
    test = ((test[kept_names].astype(np.float64) - mu) / s).to_numpy()
    train, val = tail_split(train)
    return train, val, test


def load_hepmass(data_dir=None) -> Splits:
    """HEPMASS from ``<root>/hepmass/1000_train.csv`` and ``1000_test.csv``.

    See ``preprocess_hepmass``.

    Args:
      data_dir: the data root (`keras_models.data.data_root`).

    Returns:
      `keras_models.data.Splits` with D = 21 on the real files.

    Raises:
      DatasetFileNotFoundError: if a file is missing.
      ValueError: if a file is unreadable, has rows cut short, or lacks the
        label column or the kept features.
      ImportError: without pandas (the ``paper`` extra).
    """
    pd = require("pandas", "the HEPMASS loader")

    root = data_root(data_dir)
    frames = []
    for name in ("1000_train.csv", "1000_test.csv"):
        path = dataset_file(root, "hepmass", "hepmass", name)
        with reading(path, "hepmass", "a CSV table"):
            frame = pd.read_csv(path, index_col=False)
            short = np.flatnonzero(frame.isna().any(axis=1).to_numpy())
            if len(short):  # a line cut short: the file was not fully written
                raise ValueError(f"{len(short)} rows have missing fields (first: data row {short[0]})")
        frames.append(frame)
    return _float32_splits("hepmass", *preprocess_hepmass(*frames))


# ------------------------------------------------------------------------------- MINIBOONE

def preprocess_miniboone(data: np.ndarray):
    """MINIBOONE (the file already holds the positive class without outliers and with the
    7 near-constant features removed): the last 10% is test, the last 10% of the rest
    validation, standardized with train+validation statistics. D = 43."""
    check_width(data, 43, "MINIBOONE miniboone/data.npy")
    rest, test = tail_split(np.asarray(data, dtype=np.float64))
    train, val = tail_split(rest)
    return standardize(train, val, test, stats_from=rest)


def load_miniboone(data_dir=None, filename: str = "data.npy", folder: str = "miniboone") -> Splits:
    """MINIBOONE from ``<root>/miniboone/data.npy`` (36,488 x 43).

    See ``preprocess_miniboone``.

    Args:
      data_dir: the data root (`keras_models.data.data_root`).
      filename: the file's name in its folder.
      folder: the folder under the root.

    Returns:
      `keras_models.data.Splits` with D = 43.

    Raises:
      DatasetFileNotFoundError: if the file is missing.
      ValueError: if it is unreadable or not an ``[N, 43]`` array.
    """
    path = dataset_file(data_root(data_dir), "miniboone", folder, filename)
    with reading(path, "miniboone", "a NumPy .npy array"):
        data = np.load(path)
    return _float32_splits("miniboone", *preprocess_miniboone(data))


# --------------------------------------------------------------------------------- BSDS300

BSDS300_SPLITS = ("train", "validation", "test")


def load_bsds300(data_dir=None) -> Splits:
    """BSDS300 from ``<root>/BSDS300/BSDS300.hdf5``: datasets ``train``, ``validation``,
    ``test`` of 8x8 patches with the last pixel dropped (D = 63), used as stored.

    Args:
      data_dir: the data root (`keras_models.data.data_root`).

    Returns:
      `keras_models.data.Splits` with D = 63.

    Raises:
      DatasetFileNotFoundError: if the file is missing.
      ValueError: if it is unreadable, lacks a dataset or one is not ``[N, 63]``.
    """
    import h5py

    path = dataset_file(data_root(data_dir), "bsds300", "BSDS300", "BSDS300.hdf5")
    with reading(path, "bsds300", "an HDF5 file"):
        f = h5py.File(path, "r")
    with f:
        missing = [k for k in BSDS300_SPLITS if k not in f]
        if missing:
            raise ValueError(
                f"BSDS300 {path}: expected datasets {list(BSDS300_SPLITS)}, got {sorted(f.keys())}."
            )
        with reading(path, "bsds300", "an HDF5 file"):
            arrays = [np.asarray(f[k][...]) for k in BSDS300_SPLITS]
    for k, a in zip(BSDS300_SPLITS, arrays, strict=True):
        check_width(a, 63, f"BSDS300 {path} [{k}]")
    return _float32_splits("bsds300", *arrays)
