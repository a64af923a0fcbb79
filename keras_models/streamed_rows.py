"""Rows and moments of the batch-norm statistics pass over a training set of many
batches (`keras_models.batch_norm_statistics.set_batch_norm_statistics`): the rows
mapped as far as the last pass took them, waiting for the next (`MappedRows`), and the
float64 moments summed batch by batch (`Moments`)."""

from __future__ import annotations

import tempfile

import numpy as np

__all__ = ["IN_MEMORY_BYTES", "MappedRows", "Moments"]

#: Rows mapped between two passes of `set_batch_norm_statistics` stay in memory up to
#: this size, and go to a temporary file beyond it.
IN_MEMORY_BYTES = 64 * 2**20


class MappedRows:
    """``N`` rows of one shape and dtype, written and read back by ranges of rows: in
    memory up to `IN_MEMORY_BYTES`, else in an anonymous temporary file, whose pages the
    operating system holds or writes out as memory allows (the process's own memory
    stays at a batch)."""

    def __init__(self, n: int, shape, dtype):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.row_bytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        self.array = self.file = None
        if n * self.row_bytes > IN_MEMORY_BYTES:
            self.file = tempfile.TemporaryFile(prefix="tfp_maf_rows_")
        else:
            self.array = np.empty((n, *self.shape), dtype)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.file is not None:
            self.file.close()

    def write(self, start: int, rows: np.ndarray) -> None:
        rows = np.ascontiguousarray(rows, self.dtype)
        if self.array is not None:
            self.array[start:start + len(rows)] = rows
        else:
            self.file.seek(start * self.row_bytes)
            self.file.write(memoryview(rows).cast("B"))

    def read(self, start: int, stop: int) -> np.ndarray:
        if self.array is not None:
            return self.array[start:stop]
        rows = np.empty((stop - start, *self.shape), self.dtype)
        self.file.seek(start * self.row_bytes)
        if self.file.readinto(memoryview(rows).cast("B")) != rows.nbytes:
            raise OSError("the temporary file of mapped rows came back short")
        return rows


class Moments:
    """Count, mean and sum of squared deviations, in float64, of rows seen batch by
    batch: Chan, Golub and LeVeque's pairwise update (1979), stable where the
    variance is small against the mean."""

    def __init__(self):
        self.n, self.mean, self.m2 = 0, 0.0, 0.0

    def add(self, n: int, mean, m2) -> None:
        mean, m2 = np.asarray(mean, np.float64), np.asarray(m2, np.float64)
        total = self.n + n
        delta = mean - self.mean
        self.mean = self.mean + delta * (n / total)
        self.m2 = self.m2 + m2 + delta**2 * (self.n * n / total)
        self.n = total

    @property
    def variance(self):
        return self.m2 / self.n  # the biased variance, as the paper's batch norm uses
