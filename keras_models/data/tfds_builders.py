"""TFDS builders for the five datasets of the MAF benchmark archive (manual download).

Importing this module registers ``maf_power``, ``maf_gas``, ``maf_hepmass``,
``maf_miniboone`` and ``maf_bsds300``. Each builder reads the archive files from the TFDS
manual directory (layout ``<manual_dir>/<dataset>/<file>``, the same as the data root of
``keras_models.data``) and stores the splits after exactly the preprocessing of
``keras_models.data.tabular``; examples are ``{"x": float32[D]}``::

    import tensorflow_datasets as tfds
    import keras_models.data.tfds_builders  # registers the builders

    ds = tfds.load(
        "maf_power", split="train", data_dir="~/tensorflow_datasets",
        download_and_prepare_kwargs={
            "download_config": tfds.download.DownloadConfig(manual_dir="~/.tfp_maf/data")},
    )

Preparing POWER or BSDS300 writes millions of examples once; later loads read the
prepared records. MNIST and CIFAR-10 use the standard tfds ``mnist`` and ``cifar10``
(see ``load_mnist(source='tfds')`` and ``load_cifar10(source='tfds')``).
"""

from __future__ import annotations

import numpy as np

from keras_models._optional import require
from keras_models.data import tabular

tfds = require("tensorflow_datasets", "keras_models.data.tfds_builders")

__all__ = ["MafBsds300", "MafGas", "MafHepmass", "MafMiniboone", "MafPower"]

_INSTRUCTIONS = """\
Download data.tar.gz of the MAF benchmark archive from https://zenodo.org/record/1161203
(Papamakarios et al., 2017) and unpack it into the manual directory
(`manual_dir`, default `<data_dir>/downloads/manual/`) so that `{path}` lies there.
"""

_CITATION = """\
@inproceedings{papamakarios2017masked,
  title={Masked Autoregressive Flow for Density Estimation},
  author={Papamakarios, George and Pavlakou, Theo and Murray, Iain},
  booktitle={Advances in Neural Information Processing Systems},
  year={2017}
}"""


class _MafArchiveBuilder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
    """One dataset of the archive; subclasses set the loader, D and the file path."""

    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "Preprocessing of the paper's published loaders."}
    EVENT_SIZE: int
    ARCHIVE_PATH: str
    LOADER = staticmethod(lambda data_dir: None)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.MANUAL_DOWNLOAD_INSTRUCTIONS = _INSTRUCTIONS.format(path=cls.ARCHIVE_PATH)

    def _info(self) -> tfds.core.DatasetInfo:
        return tfds.core.DatasetInfo(
            builder=self,
            description=(self.__doc__ or "").strip(),
            features=tfds.features.FeaturesDict(
                {"x": tfds.features.Tensor(shape=(self.EVENT_SIZE,), dtype=np.float32)}
            ),
            homepage="https://zenodo.org/record/1161203",
            citation=_CITATION,
        )

    def _split_generators(self, dl_manager):
        splits = self.LOADER(dl_manager.manual_dir)
        return {
            "train": self._generate_examples(splits.x_train),
            "validation": self._generate_examples(splits.x_val),
            "test": self._generate_examples(splits.x_test),
        }

    def _generate_examples(self, x):
        for i, row in enumerate(x):
            yield i, {"x": row}


class MafPower(_MafArchiveBuilder):
    """POWER (D = 6), preprocessed as in the MAF paper."""

    EVENT_SIZE, ARCHIVE_PATH = 6, "power/data.npy"
    LOADER = staticmethod(tabular.load_power)


class MafGas(_MafArchiveBuilder):
    """GAS (D = 8), preprocessed as in the MAF paper."""

    EVENT_SIZE, ARCHIVE_PATH = 8, "gas/ethylene_CO.pickle"
    LOADER = staticmethod(tabular.load_gas)


class MafHepmass(_MafArchiveBuilder):
    """HEPMASS (D = 21), preprocessed as in the MAF paper."""

    EVENT_SIZE, ARCHIVE_PATH = 21, "hepmass/1000_train.csv and hepmass/1000_test.csv"
    LOADER = staticmethod(tabular.load_hepmass)


class MafMiniboone(_MafArchiveBuilder):
    """MINIBOONE (D = 43), preprocessed as in the MAF paper."""

    EVENT_SIZE, ARCHIVE_PATH = 43, "miniboone/data.npy"
    LOADER = staticmethod(tabular.load_miniboone)


class MafBsds300(_MafArchiveBuilder):
    """BSDS300 patches (D = 63), as in the MAF paper."""

    EVENT_SIZE, ARCHIVE_PATH = 63, "BSDS300/BSDS300.hdf5"
    LOADER = staticmethod(tabular.load_bsds300)
