"""The paper's seven benchmarks and the Figure 1 density, preprocessed as published.

``load(name, data_dir=None)`` returns ``Splits`` (float32 arrays, one-hot labels for
MNIST and CIFAR-10); ``Splits.pipelines(...)`` the ``tf.data`` datasets. Files are read
from ``<root>/<dataset>/<file>``, the layout of the MAF benchmark archive; see
``_files.data_root`` for how the root is found.
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
    """Loads dataset ``name`` (one of ``LOADERS``) from the data root."""
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
