"""Optimizer state and weight lists saved with MADE kernels in one storage, given to
a model that stores them in another.

`tfp_maf.MaskedDense` writes and reads its kernel dense whatever its storage
(`tfp_maf.layers.block_layout`), so layer weights load into any. Two things hold the
storage itself: the optimizer's state, which Keras saves as one list, a slot per
variable (Adam: a momentum and a velocity), and a `get_weights` list (a run's best
epoch, kept by `keras_models.training.RunBackup`). A file written with dense kernels
(``kernel_blocks=1``, or "auto" on a GPU) holds one slot per kernel where a blocked
model has one per block, and the reverse; Keras would skip the whole optimizer state
with a warning, and a resumed run would restart Adam.

Each file records the storage it was written with (`storage_record`: each
`tfp_maf.MaskedDense`'s blocks, in the model's layer order): a model's weights
(``.weights.h5``, and inside a ``.keras`` file) beside the model's own variables
(`save_record`), a run's best weights beside its arrays. `optimizer_arrays` and
`weights_list` read that record and rearrange a list for the model: each kernel's
entries merged dense from the saved variables and split into the model's. Nothing is
inferred from shapes. `matching_weights` gives ``load_weights`` a copy of a file with
its optimizer state so rearranged (Keras' file layout: `tfp_maf._platform.compat`).
A file of 0.5.1 or before has no record: its layers' weights load into any storage,
and its optimizer state into the storage it was written with (else Keras restarts the
optimizer, and says so).

Why it is kept: a run resumed this way goes on as if uninterrupted (within 0.002 nats of
validation NLL over 5 epochs), where Keras' default, Adam restarted, moved it by up to
0.6 nats (MAF (5) of 2 x 512, MINIBOONE rows, 3 seeds;
``benchmarks/experiments/optimizer_state_resume.py``). The path is taken only when the
storages differ: a `.keras` file's config records its storage and loads with it, so only
``load_weights`` and `keras_models.training.RunBackup` meet it, after a change of device
kind or of ``kernel_blocks``.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import zipfile
from pathlib import Path

import keras
import numpy as np

from tfp_maf._platform.compat import (
    KERAS_ARCHIVE_WEIGHTS,
    read_model_record,
    read_optimizer_arrays,
    slot_of,
    write_optimizer_arrays,
)
from tfp_maf._platform.layer_tracking import sublayers
from tfp_maf.layers.block_layout import BlockLayout
from tfp_maf.layers.masked_dense import MaskedDense

__all__ = ["RECORD", "load_without_record", "matching_weights", "optimizer_arrays", "save_record", "storage_record",
           "weights_list"]

#: The name of the storage record among a model's own saved variables.
RECORD = "kernel_blocks"


def _masked_layers(model) -> list:
    return [layer for layer in sublayers(model, include_self=False) if isinstance(layer, MaskedDense)]


def storage_record(model) -> np.ndarray:
    """Each `MaskedDense` layer's blocks, in the model's layer order: the storage a file
    written now holds its kernels' optimizer state in."""
    return np.array([layer.blocks for layer in _masked_layers(model)], np.int64)


def save_record(model, store) -> None:
    """Writes `storage_record` into ``store``, a model's own variables as Keras saves them
    (``save_own_variables``), where the model has masked layers."""
    record = storage_record(model)
    if record.size:
        store[RECORD] = record


def load_without_record(store):
    """``store`` (a model's own saved variables) without the record, for Keras' own
    ``load_own_variables``."""
    return {key: store[key] for key in store.keys() if key != RECORD}


def _stored_shapes(layout, mask) -> list:
    """Shapes of the kernel variables of a ``mask`` stored in ``layout`` (None: dense).
    A block of no rows has no variable."""
    return [tuple(mask.shape)] if layout is None else [tuple(s) for s in layout.shapes if s[0] > 0]


def _merge(values: list, layout):
    """The dense kernel from its stored variables' values."""
    if layout is None:
        return values[0]
    values = iter(values)
    return layout.merge([next(values) if s[0] > 0 else None for s in layout.shapes])


def _split(dense, layout) -> list:
    """The stored variables' values of a dense kernel."""
    if layout is None:
        return [dense]
    return [b for b, s in zip(layout.split(dense), layout.shapes, strict=True) if s[0] > 0]


def _saved_storage(model, record) -> tuple:
    """The model's `MaskedDense` layers, and ``{id(layer): layout or None}`` of the storage
    a file's ``record`` (`storage_record`) says it was written with; None without a record,
    or with one of another model (another count of layers)."""
    layers = _masked_layers(model)
    if record is None or len(record) != len(layers):
        return layers, None
    return layers, {id(layer): BlockLayout.of(layer.mask, int(blocks)) if blocks > 1 else None
                    for layer, blocks in zip(layers, record, strict=True)}


class _Rearrangement:
    """How the list of ``variables`` (``model.weights`` or its trainable variables)
    reads when its kernels are stored in ``storage``, and back.

    The saved list has each layer's kernel variables (in the saved storage) where the
    model's list has the layer's first kernel variable; every other variable is itself.
    """

    def __init__(self, variables, layers, storage):
        self.variables = list(variables)
        owner = {}
        for layer in layers:
            for g, v in enumerate(layer.kernel_variables()):
                owner[id(v)] = (layer, g)
        self.storage = storage
        self.items = []  # per saved entry run: (layer or None, variable, count)
        for v in self.variables:
            layer, g = owner.get(id(v), (None, None))
            if layer is None:
                self.items.append((None, v, 1))
            elif g == 0:
                self.items.append((layer, v, len(_stored_shapes(storage[id(layer)], layer.mask))))

    def saved(self) -> list:
        """``(shape, dtype)`` of each entry of the saved list."""
        out = []
        for layer, v, _ in self.items:
            shapes = [tuple(v.shape)] if layer is None else _stored_shapes(self.storage[id(layer)], layer.mask)
            out += [(shape, v.dtype) for shape in shapes]
        return out

    def to_model(self, saved: list) -> list:
        """The saved list's values in the model's list order and storage."""
        by_variable, saved = {}, iter(saved)
        for layer, v, count in self.items:
            values = [next(saved) for _ in range(count)]
            if layer is None:
                by_variable[id(v)] = values[0]
            else:
                dense = _merge(values, self.storage[id(layer)])
                values = _split(dense, layer.layout)
                for kernel, value in zip(layer.kernel_variables(), values, strict=True):
                    by_variable[id(kernel)] = value
        return [by_variable[id(v)] for v in self.variables]


def weights_list(model, arrays: list, record=None) -> list:
    """A `get_weights` list saved with the model's kernels in the storage ``record`` says
    (`storage_record`; a run's best epoch from before a change of storage) in the model's
    storage. A list that already fits, or has no record, is returned as is (Keras
    reports one that fits nothing)."""
    shapes = [tuple(np.shape(a)) for a in arrays]
    layers, storage = _saved_storage(model, record)
    if shapes == [tuple(v.shape) for v in model.weights] or storage is None:
        return list(arrays)
    plan = _Rearrangement(model.weights, layers, storage)
    return plan.to_model(arrays) if [shape for shape, _ in plan.saved()] == shapes else list(arrays)


def optimizer_arrays(model, arrays: list, record=None) -> list | None:
    """The file's optimizer ``arrays``, saved with the kernels in the storage ``record``
    says (`storage_record`), in the order and shapes of ``model.optimizer``'s variables;
    None when they already fit, when there is no record, or when they do not fit that
    storage either (Keras then reports)."""
    optimizer = getattr(model, "optimizer", None)
    live = list(getattr(optimizer, "variables", []))
    fits = len(arrays) == len(live) and all(tuple(a.shape) == tuple(v.shape) for a, v in zip(arrays, live, strict=True))
    layers, storage = _saved_storage(model, record)
    if fits or not live or storage is None:
        return None
    # Keras names a slot by its variable's path and the slot's name, and paths repeat
    # across a model's MADEs; so both lists are rebuilt on stand-ins with unique names:
    # "model_j" for the model's j-th trainable variable, "saved_k" for the file's k-th.
    trainable = model.trainable_variables
    stand_ins = [keras.Variable(np.zeros(v.shape, v.dtype), name=f"model_{j}") for j, v in enumerate(trainable)]
    as_model = _built_like(optimizer, stand_ins)
    if len(as_model.variables) != len(live):
        return None
    slots = [_slot(w, stand_ins) for w in as_model.variables]  # (j, slot name) or None
    names = {m[1] for m in slots if m is not None}
    plan = _Rearrangement(trainable, layers, storage)
    entries = plan.saved()
    saved_stand_ins = [keras.Variable(np.zeros(shape, dtype), name=f"saved_{k}")
                       for k, (shape, dtype) in enumerate(entries)]
    as_saved = _built_like(optimizer, saved_stand_ins)
    if len(as_saved.variables) != len(arrays) or any(
            tuple(w.shape) != tuple(np.shape(a)) for w, a in zip(as_saved.variables, arrays, strict=True)):
        return None
    saved = {_slot(w, saved_stand_ins) or w.name: a for w, a in zip(as_saved.variables, arrays, strict=True)}
    by_slot = {name: plan.to_model([saved[(k, name)] for k in range(len(entries))]) for name in names}
    return [saved[w.name] if m is None else by_slot[m[1]][m[0]] for w, m in zip(as_model.variables, slots, strict=True)]


def _slot(optimizer_variable, stand_ins) -> tuple[int, str] | None:
    """``(j, slot name)`` if ``optimizer_variable`` is a slot of ``stand_ins[j]``, else None."""
    for j, v in enumerate(stand_ins):
        slot = slot_of(optimizer_variable.name, v.name)
        if slot is not None:
            return j, slot
    return None


def _built_like(optimizer, variables):
    """A fresh optimizer of ``optimizer``'s class and config, built on ``variables``."""
    twin = optimizer.__class__.from_config(optimizer.get_config())
    twin.build(variables)
    return twin


def _keras_archive(path: Path) -> bool:
    """A ``.keras`` file holding its weights in one file (not sharded)."""
    if not path.name.endswith(".keras") or not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as archive:
        return KERAS_ARCHIVE_WEIGHTS in archive.namelist()


def _open_weights(path: Path):
    """The HDF5 weights inside ``path``: the file itself, or a ``.keras`` file's member."""
    if path.name.endswith(".keras"):
        with zipfile.ZipFile(path) as archive:
            return archive.open(KERAS_ARCHIVE_WEIGHTS)
    return open(path, "rb")


@contextlib.contextmanager
def matching_weights(filepath, model):
    """Yields ``filepath``, or a copy whose optimizer state, saved with the MADE kernels
    in the other storage its record names, is rearranged for ``model``'s
    (`optimizer_arrays`). Files that are not ``.weights.h5`` or ``.keras`` pass through
    untouched (Keras reports on them)."""
    import h5py  # a dependency of Keras

    path = Path(filepath)
    if not path.is_file() or not (path.name.endswith(".weights.h5") or _keras_archive(path)):
        yield filepath
        return
    with _open_weights(path) as src, h5py.File(src, "r") as f:
        optimizer = optimizer_arrays(model, read_optimizer_arrays(f), read_model_record(f, RECORD))
    if optimizer is None:
        yield filepath
        return
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "rearranged.weights.h5"
        with _open_weights(path) as src, open(copy, "wb") as dst:
            shutil.copyfileobj(src, dst)
        with h5py.File(copy, "r+") as f:
            write_optimizer_arrays(f, optimizer)
        yield copy
