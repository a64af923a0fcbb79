"""Weight files of tfp-maf 0.1 and of later versions, loaded into either.

Keras 3 stores the weights of a model's layers under their class names
(``layers/made``, ``layers/made_1``, ...). 0.2 renamed the layers
(``MADE`` -> ``MADENetwork``, ``ExpGammaBatchNormalization`` -> ``BatchNormState``),
and so the paths. A model remembers which names its layers carry
(``legacy_layer_names``: loaded from a 0.1 ``.keras`` file); when a weights file
(``.weights.h5``, or a ``.keras`` file given to ``load_weights``) uses the other
names, `matching_weights` gives a copy renamed to the model's. Nothing else about
the layer weights changed, so the renamed copy loads as Keras would have loaded the
original. The same copy carries the optimizer state rearranged for a model whose
MADE kernels are stored otherwise than the file's, dense or in degree blocks
(`keras_models._kernel_layout`).
"""

from __future__ import annotations

import contextlib
import re
import shutil
import tempfile
import zipfile
from pathlib import Path

from keras_models import _kernel_layout

__all__ = ["matching_weights"]

# 0.1's snake-cased class name -> 0.2's, as Keras writes them.
RENAMED = {"made": "made_network", "exp_gamma_batch_normalization": "batch_norm_state"}


def _renames(names, legacy: bool) -> dict:
    """``{path in the file: path the model expects}`` for the layer groups to rename."""
    table = {new: old for old, new in RENAMED.items()} if legacy else RENAMED
    renames = {}
    for name in names:
        match = re.fullmatch(r"(.+?)(_\d+)?", name)
        if match[1] in table:
            renames[name] = table[match[1]] + (match[2] or "")
    return renames


def _keras_archive(path: Path) -> bool:
    """A ``.keras`` file holding its weights in one ``model.weights.h5`` (not sharded)."""
    if not path.name.endswith(".keras") or not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as archive:
        return "model.weights.h5" in archive.namelist()


def _open_weights(path: Path):
    """The HDF5 weights inside ``path``: the file itself, or a ``.keras`` file's member."""
    if path.name.endswith(".keras"):
        with zipfile.ZipFile(path) as archive:
            return archive.open("model.weights.h5")
    return open(path, "rb")


def _optimizer_arrays(f) -> list:
    """The optimizer's saved variables, in their order."""
    group = f.get("optimizer/vars")
    return [] if group is None else [group[str(i)][()] for i in range(len(group))]


@contextlib.contextmanager
def matching_weights(filepath, legacy: bool, model=None):
    """Yields ``filepath``, or a copy adapted to the model: layer groups renamed if
    they carry the other version's names, and, given ``model``, optimizer state saved
    with the MADE kernels in another storage rearranged for the model's (`_kernel_layout`).

    ``legacy``: whether the model's layers carry 0.1's names. Files that are not
    ``.weights.h5`` or ``.keras`` pass through untouched (Keras reports on them).
    """
    import h5py

    path = Path(filepath)
    if not path.is_file() or not (path.name.endswith(".weights.h5") or _keras_archive(path)):
        yield filepath
        return
    with _open_weights(path) as src, h5py.File(src, "r") as f:
        renames = _renames(list(f["layers"]) if "layers" in f else [], legacy)
        optimizer = None if model is None else _kernel_layout.optimizer_arrays(model, _optimizer_arrays(f))
    if not renames and optimizer is None:
        yield filepath
        return
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "renamed.weights.h5"
        with _open_weights(path) as src, open(copy, "wb") as dst:
            shutil.copyfileobj(src, dst)
        with h5py.File(copy, "r+") as f:
            for old, new in renames.items():
                f["layers"].move(old, new)
            if optimizer is not None:
                del f["optimizer/vars"]
                group = f.create_group("optimizer/vars")
                for i, value in enumerate(optimizer):
                    group[str(i)] = value
        yield copy
