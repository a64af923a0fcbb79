"""The paper's seven benchmarks and the Figure 1 density, preprocessed as published.

``load(name, data_dir=None)`` returns ``Splits`` (float32 arrays, one-hot labels for
MNIST and CIFAR-10); ``Splits.pipelines(...)`` the ``tf.data`` datasets. Files are read
from ``<root>/<dataset>/<file>``, the layout of the MAF benchmark archive; see
`data_root` for how the root is found.

| name | D | file under the root | loader |
|---|---|---|---|
| ``figure1`` | 2 | none: drawn from the density (`Figure1Density`) | `load_figure1` |
| ``power`` | 6 | ``power/data.npy`` | `load_power` |
| ``gas`` | 8 | ``gas/ethylene_CO.pickle`` | `load_gas` |
| ``hepmass`` | 21 | ``hepmass/1000_train.csv``, ``1000_test.csv`` | `load_hepmass` |
| ``miniboone`` | 43 | ``miniboone/data.npy`` | `load_miniboone` |
| ``bsds300`` | 63 | ``BSDS300/BSDS300.hdf5`` | `load_bsds300` |
| ``mnist`` | 784 | ``mnist/mnist.pkl.gz`` | `load_mnist` |
| ``cifar10`` | 3072 | ``cifar10/data_batch_1`` ... ``test_batch`` | `load_cifar10` |

GAS and HEPMASS need pandas, and the tfds sources tensorflow-datasets: the ``paper``
extra (``pip install "tfp-maf[paper]"``).

Example:

>>> from keras_models import data
>>> splits = data.load("figure1", n_train=500, n_val=100, n_test=100)
>>> splits.event_size, splits.sizes
(2, (500, 100, 100))
>>> pipes = splits.pipelines(batch_size=100)
>>> next(iter(pipes.train)).shape  # shuffled batches of x; ``(x, y)`` if conditional
TensorShape([100, 2])
"""

from __future__ import annotations

from keras_models.data._files import DatasetFileNotFoundError, data_root
from keras_models.data.images import load_cifar10, load_mnist
from keras_models.data.pipeline import Pipelines, array_dataset, make_pipelines
from keras_models.data.splits import Splits
from keras_models.data.tabular import (
    load_bsds300,
    load_gas,
    load_hepmass,
    load_miniboone,
    load_power,
)
from keras_models.data.toy import Figure1Density, load_figure1

#: Loader per dataset name (the ``--dataset`` choices of the command line).
LOADERS = {
    "figure1": lambda data_dir=None, **kw: load_figure1(**kw),
    "power": load_power,
    "gas": load_gas,
    "hepmass": load_hepmass,
    "miniboone": load_miniboone,
    "bsds300": load_bsds300,
    "mnist": load_mnist,
    "cifar10": load_cifar10,
}


def load(name: str, data_dir=None, **kwargs) -> Splits:
    """Loads dataset ``name`` (one of ``LOADERS``) from the data root.

    Args:
      name: ``"figure1"``, ``"power"``, ``"gas"``, ``"hepmass"``, ``"miniboone"``,
        ``"bsds300"``, ``"mnist"`` or ``"cifar10"``.
      data_dir: the data root, holding ``<dataset folder>/<file>``; None: the
        ``TFP_MAF_DATA`` environment variable, else ``~/.tfp_maf/data``
        (`data_root`). ``figure1`` reads no file; the tfds sources of MNIST and
        CIFAR-10 take the tfds data directory here.
      **kwargs: the loader's own keywords: ``n_train``, ``n_val``, ``n_test``,
        ``seed`` (`load_figure1`); ``source`` (`load_mnist`, `load_cifar10`),
        ``flip`` (`load_cifar10`).

    Returns:
      The `Splits`, preprocessed as the paper's published loaders do.

    Raises:
      ValueError: for an unknown name, or a file that is truncated, corrupt or
        not in the expected format (the message names the file and its source).
      DatasetFileNotFoundError: if a file is missing (the message names the path
        looked at and where the file comes from).
      ImportError: if the dataset needs the ``paper`` extra and it is not
        installed.

    Example: the embedded Figure 1 density, then POWER from a file of the
    archive's format (an ``[N, 8]`` array) written to a temporary root:

    >>> import os, tempfile, numpy as np
    >>> load("figure1", n_train=100, n_val=20, n_test=20).x_train.shape
    (100, 2)
    >>> root = tempfile.mkdtemp()
    >>> os.makedirs(os.path.join(root, "power"))
    >>> np.save(os.path.join(root, "power", "data.npy"),
    ...         np.random.default_rng(0).normal(size=(1000, 8)))
    >>> power = load("power", data_dir=root)
    >>> power.event_size, power.sizes, power.x_train.dtype
    (6, (810, 90, 100), dtype('float32'))
    """
    if name not in LOADERS:
        raise ValueError(f"unknown dataset {name!r}; expected one of {sorted(LOADERS)}.")
    return LOADERS[name](data_dir=data_dir, **kwargs)


__all__ = [
    "LOADERS",
    "DatasetFileNotFoundError",
    "Figure1Density",
    "Pipelines",
    "Splits",
    "array_dataset",
    "data_root",
    "load",
    "load_bsds300",
    "load_cifar10",
    "load_figure1",
    "load_gas",
    "load_hepmass",
    "load_miniboone",
    "load_mnist",
    "load_power",
    "make_pipelines",
]
