"""Degree blocks: a MADE kernel stored without most of its mask's zeros.

A MADE mask connects input ``i`` to unit ``j`` when ``d_j >= d_i`` (``>`` for the
output layer), so the set of inputs each unit sees is a prefix of the inputs sorted
by degree, and these prefixes are nested. With the rows sorted by degree and the
columns by prefix length, the mask is a staircase:

    sorted mask[r, c] = r < k_c,     k_c non-decreasing in c

Cutting the sorted columns into ``G`` groups of about equal width, group ``g`` needs
only the first ``K_g = max_{c in g} k_c`` rows: its block is ``[K_g, n_g]``, and

    x @ W = concat_g(x_sorted[:, :K_g] @ W_g)[:, inverse column order]

skips every multiply-add (and every optimizer entry) of the zeros to the right of
the staircase, all but the zeros inside each block. For the paper's MNIST MADE MoG
(1,024 units, 784 x 30 outputs) 8 blocks store 64% of the dense kernel.

`BlockLayout.of(mask, blocks)` finds the orders (or returns None when the mask's
supports are not nested); `split` and `merge` convert between the dense kernel and
the blocks, in NumPy or TensorFlow.

In a MADE, one layer's column order is the next layer's row order (both sort the same
units by degree), so a chain of blocked layers can pass its hidden units from one to
the next in that order and put only the network's inputs and outputs in order
(`sorted_matmul`, `reorder`). Gathering the units at every layer instead cost more
than the blocks saved at 512 units: under XLA the gradient of a gather is a scatter.

Example:

>>> import numpy as np
>>> mask = np.array([[1, 1, 1], [0, 1, 1], [0, 0, 1]], np.float32)[:, ::-1]
>>> layout = BlockLayout.of(mask, blocks=3)
>>> [m.shape for m in layout.block_masks]
[(1, 1), (2, 1), (3, 1)]
>>> w = np.arange(9.0).reshape(3, 3) * mask
>>> np.array_equal(layout.merge(layout.split(w)), w)
True
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow as tf

from tfp_maf.devices import check_device_kind

__all__ = ["AUTO_RULE", "BlockLayout", "auto_blocks", "check_rule", "reorder", "staircase"]

# On a CPU, "auto" blocks kernels of at least AUTO_MIN_ENTRIES entries in AUTO_BLOCKS
# groups, and those of at least AUTO_LARGE_ENTRIES in AUTO_LARGE_BLOCKS, each group of at
# least MIN_BLOCK_UNITS units (benchmarks/block_sizes.py, AMD EPYC: config A's 512 x 512
# ran slower in any blocks; MNIST MAF (5)'s 784 x 1,024 and 1,024 x 1,568 trained 1.09x as
# fast in 4 blocks as in 8, with about 80 MiB less at the peak of a run; MADE MoG's
# 1,024 x 23,520 output layer gains from 8).
AUTO_MIN_ENTRIES, AUTO_BLOCKS = 2**19, 4
AUTO_LARGE_ENTRIES, AUTO_LARGE_BLOCKS = 2**22, 8
MIN_BLOCK_UNITS = 128

#: The rule "auto" follows. Rule 1 (0.4.0 and before) stored every kernel of at least
#: AUTO_MIN_ENTRIES in 8 blocks; rule 2 is the one above. A network resolves "auto" once,
#: when it is built, and saves the counts it chose (`tfp_maf.MADENetwork`'s config): only
#: the configs of 0.5.1 and before, which saved "auto" and the rule (none before 0.5.0:
#: rule 1), are read by a rule again, given as `auto_blocks`' argument.
AUTO_RULE = 2


def check_rule(rule) -> int:
    """``rule`` if it is 1 or 2 (`AUTO_RULE`), else a ValueError."""
    if rule not in (1, 2):
        raise ValueError(f"kernel_blocks_rule must be 1 or 2, got {rule!r}.")
    return rule


def auto_blocks(shape, device: str | None = None, rule: int = AUTO_RULE) -> int:
    """The column groups ``kernel_blocks="auto"`` stores a ``[fan_in, units]`` kernel in
    on a ``device`` kind, ``"cpu"`` or ``"gpu"`` (None: the kind TensorFlow runs on here),
    by ``rule`` (`AUTO_RULE`; 1 reads the configs of 0.4.0 and before).

    A GPU keeps every kernel dense: the blocks were measured on 2-core CPUs, where a
    matmul's time follows its multiply-adds; on a GPU each block is one more kernel
    launch for work the dense matmul does in parallel anyway.

    >>> auto_blocks((784, 1024), "cpu"), auto_blocks((1024, 23520), "cpu")
    (4, 8)
    >>> auto_blocks((784, 1024), "gpu"), auto_blocks((43, 512), "cpu")
    (1, 1)
    >>> auto_blocks((784, 1024), "cpu", rule=1)
    8
    """
    device, rule = check_device_kind(device), check_rule(rule)
    fan_in, units = shape
    entries = fan_in * units
    if device == "gpu" or entries < AUTO_MIN_ENTRIES:
        return 1
    if entries >= AUTO_LARGE_ENTRIES or rule == 1:
        blocks = AUTO_LARGE_BLOCKS
    else:
        blocks = AUTO_BLOCKS
    return max(1, min(blocks, units // MIN_BLOCK_UNITS))


@dataclasses.dataclass(frozen=True, eq=False)
class BlockLayout:
    """Row and column orders and column groups that store a nested mask in blocks.

    Attributes:
      rows: input order, degree ascending (the inputs every unit sees first).
      cols: unit order, number of inputs seen ascending.
      edges: ``G + 1`` positions in the sorted columns that bound the groups.
      depths: ``K_g``, the rows group ``g`` needs.
      block_masks: the mask inside each block, ``[K_g, n_g]``.
    """

    rows: np.ndarray
    cols: np.ndarray
    edges: np.ndarray
    depths: tuple
    block_masks: tuple

    @classmethod
    def of(cls, mask, blocks: int) -> BlockLayout | None:
        """The layout of ``mask`` in ``blocks`` column groups, or None if its supports
        are not nested (not a MADE mask) or a single block would store it all."""
        ranks = staircase(mask)
        if ranks is None:
            return None
        mask = np.asarray(mask) != 0
        fan_in, units = mask.shape
        rows = np.argsort(ranks[0], kind="stable")
        cols = np.argsort(ranks[1], kind="stable")
        sorted_mask = mask[rows][:, cols]
        seen = ranks[1][cols]
        edges = np.linspace(0, units, min(int(blocks), units) + 1).round().astype(int)
        depths = tuple(int(seen[hi - 1]) for hi in edges[1:])
        if len(depths) < 2 or depths[0] == fan_in:
            return None
        block_masks = tuple(
            sorted_mask[:k, lo:hi].astype(np.float32) for k, lo, hi in zip(depths, edges[:-1], edges[1:], strict=True)
        )
        return cls(rows, cols, edges, depths, block_masks)

    @property
    def shapes(self) -> list:
        """``[K_g, n_g]`` of each block."""
        return [m.shape for m in self.block_masks]

    @property
    def stored(self) -> int:
        """Entries the blocks hold (against ``fan_in * units`` dense)."""
        return sum(int(np.prod(s)) for s in self.shapes)

    def split(self, dense):
        """The blocks of a dense ``[fan_in, units]`` kernel (NumPy in, NumPy out)."""
        dense = np.asarray(dense)[self.rows][:, self.cols]
        return [dense[:k, lo:hi] for k, lo, hi in zip(self.depths, self.edges[:-1], self.edges[1:], strict=True)]

    def merge(self, blocks):
        """The dense ``[fan_in, units]`` kernel from its blocks, zeros elsewhere (TF or NumPy).

        A block of no rows may be None."""
        fan_in = len(self.rows)
        dtype = next(b.dtype for b in blocks if b is not None)
        if all(isinstance(b, np.ndarray | None) for b in blocks):
            dense = np.zeros((fan_in, int(self.edges[-1])), dtype)
            for b, lo, hi in zip(blocks, self.edges[:-1], self.edges[1:], strict=True):
                if b is not None:
                    dense[: b.shape[0], lo:hi] = b
            out = np.empty_like(dense)
            out[np.ix_(self.rows, self.cols)] = dense
            return out
        padded = tf.concat([tf.zeros([fan_in, s[1]], dtype) if b is None else tf.pad(b, [[0, fan_in - s[0]], [0, 0]])
                            for b, s in zip(blocks, self.shapes, strict=True)], axis=1)
        padded = tf.gather(padded, np.argsort(self.rows), axis=0)
        return tf.gather(padded, np.argsort(self.cols), axis=1)

    def matmul(self, inputs, blocks):
        """``inputs @ dense`` from the blocks, inputs and outputs in the units' own order.
        A block of no rows (units that see no input: the first variable's outputs) may
        be None."""
        outputs = self.sorted_matmul(reorder(inputs, None, self.rows), blocks)
        return reorder(outputs, self.cols, None)

    def sorted_matmul(self, inputs, blocks):
        """`matmul` with the inputs in ``rows`` order and the outputs in ``cols`` order:
        one matmul per block on a prefix of the inputs, and no gather."""
        outputs = []
        for k, block, (_, width) in zip(self.depths, blocks, self.shapes, strict=True):
            if k == 0:
                outputs.append(tf.zeros(tf.concat([tf.shape(inputs)[:-1], [width]], 0), inputs.dtype))
            else:
                outputs.append(tf.matmul(inputs[..., :k], block))
        return tf.concat(outputs, axis=-1)


def staircase(mask) -> tuple | None:
    """``(rank, seen)`` with ``mask[i, j] = rank[i] < seen[j]``, or None when the mask's
    supports are not nested (not a MADE mask).

    ``rank`` orders the inputs by how many units see them (most first), ``seen`` counts
    each unit's inputs: both int32 vectors, so a trace can build the mask from them
    (`tfp_maf.layers.mask_gradients`) instead of carrying it as a constant.
    """
    mask = np.asarray(mask) != 0
    seen = mask.sum(0).astype(np.int32)
    rank = np.empty(mask.shape[0], np.int32)
    rank[np.argsort(-mask.sum(1), kind="stable")] = np.arange(mask.shape[0], dtype=np.int32)
    return (rank, seen) if np.array_equal(mask, rank[:, None] < seen[None, :]) else None


def reorder(x, have, want):
    """``x`` with its last axis, which holds units in order ``have``, put in order ``want``.

    An order is an array of unit indices, position by position (``x[..., i]`` is unit
    ``have[i]``); None is the units' own order. The permutations a MADE needs are the
    identity and, for a reversed variable order, a reversal of groups (one variable's
    outputs): both are taken without a gather, whose gradient under XLA is a slow
    scatter. Any other order is gathered.
    """
    if have is None and want is None:
        return x
    n = int(x.shape[-1])
    have = np.arange(n) if have is None else np.asarray(have)
    want = np.arange(n) if want is None else np.asarray(want)
    position = np.empty(n, np.int64)
    position[have] = np.arange(n)
    index = position[want]  # result[..., j] = x[..., index[j]]
    if np.array_equal(index, np.arange(n)):
        return x
    group = n - int(index[0])  # a reversal of groups of this size, if it is one
    if n % group == 0 and np.array_equal(index, np.arange(n).reshape(-1, group)[::-1].ravel()):
        shape = tf.shape(x)
        grouped = tf.reshape(x, tf.concat([shape[:-1], [n // group, group]], 0))
        return tf.reshape(tf.reverse(grouped, [-2]), shape)
    return tf.gather(x, index, axis=-1)
