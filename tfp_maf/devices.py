"""Which kind of device runs the ops: CPU-only speed tricks check it.

A GPU takes the plain path (one matmul per kernel, one slice of the batch): the
tricks that pay on a 2-core CPU (degree blocks, a batch slice per core) were
measured there and would add kernel launches on a GPU.
"""

from __future__ import annotations

import tensorflow as tf

__all__ = ["DEVICE_KINDS", "check_device_kind", "device_kind"]

DEVICE_KINDS = ("cpu", "gpu")


def device_kind() -> str:
    """``"gpu"`` when TensorFlow places ops on a GPU by default, else ``"cpu"``."""
    return "gpu" if tf.config.list_logical_devices("GPU") else "cpu"


def check_device_kind(kind: str | None) -> str:
    """``kind`` checked, or the current process's (`device_kind`) for None."""
    if kind is None:
        return device_kind()
    if kind not in DEVICE_KINDS:
        raise ValueError(f"a device kind must be one of {DEVICE_KINDS} or None, got {kind!r}.")
    return kind
