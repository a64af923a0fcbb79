"""MNIST and CIFAR-10 as the paper models them: dequantized pixels in logit space.

A pixel byte b becomes x = (b + u) / 256 with u ~ U[0, 1) (one grey level of uniform
noise), then logit(lambda + (1 - 2 lambda) x), with lambda = 1e-6 for MNIST and 0.05 for
CIFAR-10. Densities are reported in logit space; ``evaluation.bits_per_pixel`` converts
them with the appendix formula. Labels are one-hot, for the conditional models.

Example (pure functions, no files needed):

>>> import numpy as np
>>> x = dequantize(np.array([[0, 255]], dtype=np.uint8), np.random.RandomState(0))
>>> bool(np.all((x >= 0) & (x < 1)))
True
>>> np.round(logit_transform(np.array([0.5]), 0.05), 6)
array([0.])
"""

from __future__ import annotations

import gzip
import pickle

import numpy as np

from keras_models._optional import require
from keras_models.data._files import check_width, data_root, dataset_file, reading
from keras_models.data.splits import Splits

__all__ = [
    "CIFAR10_LAMBDA",
    "MNIST_LAMBDA",
    "dequantize",
    "flip_horizontal",
    "load_cifar10",
    "load_mnist",
    "logit_transform",
    "one_hot",
]

MNIST_LAMBDA = 1e-6
CIFAR10_LAMBDA = 0.05
NUM_CLASSES = 10


def dequantize(pixels: np.ndarray, rng: np.random.RandomState) -> np.ndarray:
    """(b + u) / 256 for bytes b (uint8 0-255), u ~ U[0, 1): values in [0, 1)."""
    return (pixels + rng.rand(*pixels.shape).astype(np.float32)) / np.float32(256.0)


def logit_transform(x: np.ndarray, lam: float) -> np.ndarray:
    """logit(lam + (1 - 2 lam) x), the map from [0, 1) pixels to the modelled space."""
    p = lam + (1 - 2 * lam) * x
    return np.log(p) - np.log1p(-p)


def flip_horizontal(x: np.ndarray, channels: int, side: int) -> np.ndarray:
    """Mirrors channel-major flattened images ``[N, channels * side * side]`` left to right."""
    return x.reshape(-1, channels, side, side)[..., ::-1].reshape(x.shape)


def one_hot(labels: np.ndarray, num_classes: int = NUM_CLASSES) -> np.ndarray:
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.size and not np.issubdtype(labels.dtype, np.integer):
        # astype(int64) would truncate 1.7 to 1, and index one-hot rows into [N, C, C].
        raise ValueError(f"expected one integer label per row, got labels of shape {list(labels.shape)} "
                         f"and dtype {labels.dtype}.")
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        raise ValueError(
            f"expected integer labels in [0, {num_classes}), got values in "
            f"[{labels.min()}, {labels.max()}]."
        )
    return np.eye(num_classes, dtype=np.float32)[labels.astype(np.int64)]


def _image_splits(name, parts, lam) -> Splits:
    (x_tr, l_tr), (x_va, l_va), (x_te, l_te) = parts
    return Splits(
        name,
        *(np.asarray(x, dtype=np.float32) for x in (x_tr, x_va, x_te)),
        *(one_hot(l) for l in (l_tr, l_va, l_te)),
        num_classes=NUM_CLASSES,
        logit_lambda=lam,
    )


def _described(value) -> str:
    """What a file held where a structure was expected, for an error message."""
    name = type(value).__name__
    size = f" of {len(value)}" if isinstance(value, (tuple, list, dict)) else ""
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}{size}"


# ----------------------------------------------------------------------------------- MNIST

def preprocess_mnist(parts, lam: float = MNIST_LAMBDA):
    """``parts`` = ((x, labels) for train, validation, test) with pixels = byte / 256 in
    [0, 1). Adds U[0, 1/256) noise (one RandomState(42) for the three splits, in that
    order) and applies the logit transform."""
    rng = np.random.RandomState(42)
    out = []
    for split, part in zip(("train", "validation", "test"), parts, strict=True):
        if not (isinstance(part, (tuple, list)) and len(part) == 2):
            raise ValueError(f"MNIST {split} split: expected a pair (images, labels), got {_described(part)}.")
        x, labels = part
        x = np.asarray(x)
        check_width(x, 784, f"MNIST {split} images")
        if x.size and (x.min() < 0 or x.max() >= 1):
            raise ValueError(
                f"MNIST {split} images: expected pixels = byte / 256 in [0, 1), got values in "
                f"[{x.min()}, {x.max()}]."
            )
        x = x + rng.rand(*x.shape) / 256.0
        out.append((logit_transform(x, lam), np.asarray(labels)))
    return out


def load_mnist(data_dir=None, source: str = "pickle") -> Splits:
    """MNIST: 50,000 / 10,000 / 10,000 rows of 784 logit-space pixels, one-hot labels.

    ``source='pickle'`` reads ``<root>/mnist/mnist.pkl.gz`` (the classic pickle);
    ``source='tfds'`` uses an already prepared tfds ``mnist`` (``data_dir`` is then the
    tfds data directory), its last 10,000 training images as validation.

    Args:
      data_dir: the data root (`keras_models.data.data_root`), or the tfds data
        directory for ``source='tfds'``.
      source: ``"pickle"`` or ``"tfds"``.

    Returns:
      `keras_models.data.Splits` with D = 784, 10 classes and
      ``logit_lambda = 1e-6``.

    Raises:
      DatasetFileNotFoundError: if the pickle is missing.
      ValueError: for an unknown source, or a file that is unreadable or holds
        something else.
      ImportError: for ``source='tfds'`` without tensorflow-datasets (the
        ``paper`` extra).
    """
    if source == "tfds":
        train, test = _tfds_arrays("mnist", data_dir)
        parts = [(x.reshape(len(x), 784) / 256.0, l) for x, l in (*_tail(train, 10_000), test)]
    elif source == "pickle":
        path = dataset_file(data_root(data_dir), "mnist", "mnist", "mnist.pkl.gz")
        with reading(path, "mnist", "a gzipped pickle"), gzip.open(path, "rb") as f:
            parts = pickle.load(f, encoding="latin1")
        if not (isinstance(parts, (tuple, list)) and len(parts) == 3):
            raise ValueError(
                f"MNIST {path}: expected ((x_train, y_train), (x_val, y_val), (x_test, y_test)), "
                f"got a {type(parts).__name__}."
            )
    else:
        raise ValueError(f"source: expected 'pickle' or 'tfds', got {source!r}.")
    return _image_splits("mnist", preprocess_mnist(parts), MNIST_LAMBDA)


# -------------------------------------------------------------------------------- CIFAR-10

def preprocess_cifar10(train_bytes, train_labels, test_bytes, test_labels, lam=CIFAR10_LAMBDA,
                       flip: bool = True):
    """``*_bytes``: uint8 ``[N, 3072]`` channel-major images (the CIFAR batch layout).
    The last 10% of train is validation; every split is dequantized (one RandomState(42),
    train then validation then test) and logit-transformed; the training set is then
    augmented with the horizontal flip of every image (labels repeated)."""
    for what, x in (("training", train_bytes), ("test", test_bytes)):
        check_width(np.asarray(x), 3072, f"CIFAR-10 {what} images")
    rng = np.random.RandomState(42)
    n_train = int(0.9 * len(train_bytes))
    parts = [
        (train_bytes[:n_train], train_labels[:n_train]),
        (train_bytes[n_train:], train_labels[n_train:]),
        (test_bytes, test_labels),
    ]
    out = [(logit_transform(dequantize(x, rng), lam), np.asarray(l)) for x, l in parts]
    if flip:
        x, l = out[0]
        out[0] = (np.vstack([x, flip_horizontal(x, 3, 32)]), np.concatenate([l, l]))
    return out


def _read_cifar_batch(path):
    with reading(path, "cifar10", "a CIFAR-10 python batch (a pickled dict)"), open(path, "rb") as f:
        batch = pickle.load(f, encoding="bytes")
    if not isinstance(batch, dict):
        raise ValueError(f"CIFAR-10 {path}: expected a dict with 'data' and 'labels', got {_described(batch)}.")
    batch = {k.decode() if isinstance(k, bytes) else k: v for k, v in batch.items()}
    if "data" not in batch or "labels" not in batch:
        raise ValueError(f"CIFAR-10 {path}: expected a dict with 'data' and 'labels', got keys {sorted(batch)}.")
    data = np.asarray(batch["data"])
    if data.dtype != np.uint8:
        raise ValueError(f"CIFAR-10 {path}: expected uint8 pixel bytes, got {data.dtype}.")
    return data, np.asarray(batch["labels"])


def load_cifar10(data_dir=None, source: str = "batches", flip: bool = True) -> Splits:
    """CIFAR-10: 90,000 (45,000 and their flips) / 5,000 / 10,000 rows of 3,072
    logit-space values, one-hot labels.

    ``source='batches'`` reads ``<root>/cifar10/data_batch_1..5`` and ``test_batch``;
    ``source='tfds'`` uses an already prepared tfds ``cifar10`` (``data_dir`` is then the
    tfds data directory).

    Args:
      data_dir: the data root (`keras_models.data.data_root`), or the tfds data
        directory for ``source='tfds'``.
      source: ``"batches"`` or ``"tfds"``.
      flip: add the horizontal flip of every training image (the paper does).

    Returns:
      `keras_models.data.Splits` with D = 3072, 10 classes and
      ``logit_lambda = 0.05``.

    Raises:
      DatasetFileNotFoundError: if a batch file is missing.
      ValueError: for an unknown source, or a file that is unreadable or holds
        something else.
      ImportError: for ``source='tfds'`` without tensorflow-datasets (the
        ``paper`` extra).
    """
    if source == "tfds":
        (x, l), (xt, lt) = _tfds_arrays("cifar10", data_dir)
        # tfds images are [N, 32, 32, 3]; the batch layout is channel-major.
        to_bytes = lambda images: images.transpose(0, 3, 1, 2).reshape(len(images), 3072)  # noqa: E731
        arrays = (to_bytes(x), l, to_bytes(xt), lt)
    elif source == "batches":
        root = data_root(data_dir)
        batches = [
            _read_cifar_batch(dataset_file(root, "cifar10", "cifar10", f"data_batch_{i}"))
            for i in range(1, 6)
        ]
        test = _read_cifar_batch(dataset_file(root, "cifar10", "cifar10", "test_batch"))
        arrays = (np.concatenate([b[0] for b in batches]), np.concatenate([b[1] for b in batches]), *test)
    else:
        raise ValueError(f"source: expected 'batches' or 'tfds', got {source!r}.")
    return _image_splits("cifar10", preprocess_cifar10(*arrays, flip=flip), CIFAR10_LAMBDA)


# ------------------------------------------------------------------------------------ tfds

def _tail(pair, n):
    x, l = pair
    return (x[:-n], l[:-n]), (x[-n:], l[-n:])


def _tfds_arrays(name, data_dir):
    """``((x_train, labels), (x_test, labels))`` from an already prepared tfds dataset."""
    tfds = require("tensorflow_datasets", f"the tfds source of {name}")
    try:
        splits = tfds.load(name, split=["train", "test"], data_dir=data_dir, as_supervised=True,
                           download=False)
    except Exception as err:  # tfds raises several types for "not prepared"
        raise FileNotFoundError(
            f"{name}: no prepared tfds dataset {name!r} in data_dir={data_dir!r} ({err}). Run "
            f"`tfds build {name}` where there is internet, or use the file source."
        ) from err
    out = []
    for split in splits:
        batches = list(tfds.as_numpy(split.batch(10_000)))
        out.append(tuple(np.concatenate([b[i] for b in batches]) for i in (0, 1)))
    return out
