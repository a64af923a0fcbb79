"""What the sampling engine reads of a MADE, and how it schedules a pass.

Nothing here holds a weight or a layer: `Structure` is a frozen view of a MADE's sizes,
activation and degree bookkeeping (`SequentialPlan`), `Tuning` the knobs a caller may
set, and `Schedule` the tuning resolved for one structure. Two MADEs of the same sizes
and tuning share their compiled loops (`tfp_maf.sampling.runner`), whatever their
orders: the loops read the degrees as inputs (`LoopTables`).
"""

from __future__ import annotations

import dataclasses
import os
import weakref
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import tensorflow as tf

from tfp_maf import devices

__all__ = ["LoopShape", "LoopTables", "Schedule", "SequentialPlan", "Structure", "Tuning"]


class SequentialPlan:
    """Static (NumPy) bookkeeping of a MADE's degrees: sort orders and block offsets.

    ``var_at[t]``: the variable of degree t + 1. For hidden layer l, ``unit_order[l]``
    sorts its units by degree and ``offsets[l][k]`` counts its units of degree <= k.

    >>> plan = SequentialPlan(np.array([2, 1, 3]), [np.array([1, 2, 1, 2])])
    >>> plan.var_at.tolist(), plan.unit_order[0].tolist(), plan.offsets[0].tolist()
    ([1, 0, 2], [0, 2, 1, 3], [0, 2, 4, 4])
    """

    @classmethod
    def of(cls, made) -> SequentialPlan:
        """The plan of a `tfp_maf.layers.MADENetwork`, made once per network."""
        plan = _PLANS.get(made)
        if plan is None:
            plan = _PLANS[made] = cls(made.input_degrees, made.degrees)
        return plan

    def __init__(self, input_degrees: np.ndarray, hidden_degrees: list[np.ndarray]):
        self.event_size = D = len(input_degrees)
        self.var_at = np.argsort(input_degrees, kind="stable")
        self.unit_order = [np.argsort(d, kind="stable") for d in hidden_degrees]
        self.offsets = [
            np.searchsorted(np.sort(d, kind="stable"), np.arange(D + 1), side="right").astype(np.int32)
            for d in hidden_degrees
        ]
        # What two plans compare by (`Structure.key`): computed once, read at every pass.
        arrays = [self.var_at, *self.unit_order, *self.offsets]
        self.fingerprint = b"|".join(np.ascontiguousarray(a, np.int64).tobytes() for a in arrays)


# A network's degrees never change: its plan is kept while the network lives.
_PLANS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class Structure(NamedTuple):
    """What the compiled loops read of a MADE: its sizes, activation and degree
    bookkeeping, no weights and no layers, so that a compiled loop keeps no model alive.
    """

    event_size: int
    hidden_units: tuple
    params_per_dim: int
    activation: Callable
    conditional_dims: int | None
    plan: SequentialPlan

    @classmethod
    def of(cls, made) -> Structure:
        """The structure of a `tfp_maf.layers.MADENetwork` (or anything with its attributes)."""
        return cls(made.event_size, tuple(made.hidden_units), made.params_per_dim,
                   made.activation, made.conditional_dims, SequentialPlan.of(made))

    def key(self) -> tuple:
        return (self.event_size, self.hidden_units, self.params_per_dim, self.activation,
                self.conditional_dims, None if self.plan is None else self.plan.fingerprint)

    def sizes(self) -> Structure:
        """The structure without its degrees (``plan`` None): all that a compiled loop
        reads of it, the degrees coming as its inputs (`LoopTables.tensors`)."""
        return self._replace(plan=None)


@dataclasses.dataclass(frozen=True)
class Tuning:
    """How a sequential pass is scheduled; ``None`` chooses from the MADE's sizes.

    Args:
      block_steps: degrees per block of the loop (`tfp_maf.sampling.loops`); 1 runs
        step by step, more than D runs D (one block). Default: `default_block_steps`.
      chunk_rows: batch rows per call of the compiled loop. Default: a chunk whose
        state is about `CHUNK_BYTES`.
      parts: slices of the batch run at once. Default: one per CPU core (one on a GPU).

    >>> Tuning(block_steps=4)
    Tuning(block_steps=4, chunk_rows=None, parts=None)
    """

    block_steps: int | None = None
    chunk_rows: int | None = None
    parts: int | None = None

    def __post_init__(self):
        for name in ("block_steps", "chunk_rows", "parts"):
            value = getattr(self, name)
            if value is not None and int(value) < 1:
                raise ValueError(f"Tuning.{name} must be a positive integer or None, got {value!r}.")


#: State bytes per batch chunk: the step-by-step loop reads the whole state at every
#: step, so it should stay in cache; the blocked loop reads it once a block, and fewer,
#: larger chunks are faster (see `benchmarks/results/sampling.json`).
CHUNK_BYTES = {"stepwise": 1 << 20, "blocked": 1 << 22}

#: Batches up to this many rows run as one chunk of this size (`Schedule.chunk_sizes`).
SMALL_CHUNK = 64

#: Blocks of fewer steps cost more in bookkeeping than their matmuls save.
MIN_BLOCK = 8


def default_block_steps(structure: Structure) -> int:
    """The largest power of two S whose in-block work, counted as ``P W_L + sum_l W_l
    W_(l-1)`` multiply-adds a step and sample (``W_0 = S``, ``W_l`` about ``S H_l / D``
    units), stays under 1/8 of a forward pass; 1 (step by step) when that S is below
    `MIN_BLOCK`. The MNIST-like MADE gets 16, the MINIBOONE-like one 1 (measured fastest
    by ``benchmarks/sampling.py``).

    >>> made = Structure(784, (1024,), 2, None, None, None)
    >>> default_block_steps(made), default_block_steps(made._replace(event_size=43, hidden_units=(512, 512)))
    (16, 1)
    """
    D, P, hidden = structure.event_size, structure.params_per_dim, structure.hidden_units
    widths = [D, *hidden]
    forward = sum(a * b for a, b in zip(widths, [*hidden, D * P], strict=True))
    best = 1
    for S in (2 ** k for k in range(1, 12)):
        if S > D:
            break
        win = [S] + [max(1, S * h // D) for h in hidden]
        inner = P * win[-1] + sum(a * b for a, b in zip(win[1:], win[:-1], strict=True))
        if D * inner > forward / 8:
            break
        best = S
    return best if best >= MIN_BLOCK else 1


class Schedule(NamedTuple):
    """`Tuning` resolved for one structure: what shapes the compiled programs."""

    block_steps: int
    chunk_sizes: tuple  # the batch sizes the loop is compiled for, the last the full chunk
    parts: int | None  # None: one per core, decided per call (`Schedule.parts_for`)

    @classmethod
    def of(cls, structure: Structure, tuning: Tuning) -> Schedule:
        # A block of more steps than D would be one block padded with empty steps,
        # each compiled and run for nothing: D steps are the whole pass.
        S = min(tuning.block_steps or default_block_steps(structure), structure.event_size)
        full = tuning.chunk_rows
        if full is None:
            # Rows whose state (inputs and every hidden layer, float32) is about CHUNK_BYTES.
            width = structure.event_size + sum(structure.hidden_units)
            budget = CHUNK_BYTES["stepwise" if S == 1 else "blocked"]
            full = int(max(32, 2 ** np.floor(np.log2(budget / (4 * width)))))
        # Two programs at most: each chunk size is an XLA program the process keeps, and a
        # batch of one padded to 64 rows costs about what one row does (the D steps' overhead).
        sizes = (SMALL_CHUNK, int(full)) if SMALL_CHUNK < full else (int(full),)
        return cls(int(S), sizes, tuning.parts)

    def parts_for(self, batch: int | None) -> int:
        """How many slices of the batch run at once: one per CPU core, no more than
        there are full chunks to share out; one on a GPU, which runs each step's ops
        over the whole batch in parallel already.

        An XLA loop runs on one core (XLA parallelises large ops, never loop
        iterations), so one call would leave the other cores idle.
        """
        if self.parts is not None:
            parts = self.parts
        elif devices.device_kind() == "gpu":
            return 1
        else:
            # The cores this process may run on (a container or taskset may allow fewer).
            cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
            # No more parts than inter-op threads to run them (0: TF's default, one per core).
            parts = min(cores, tf.config.threading.get_inter_op_parallelism_threads() or cores)
        if batch is not None:
            parts = max(1, min(parts, -(-int(batch) // self.chunk_sizes[-1])))  # an empty batch: 1
        return parts


class LoopShape(NamedTuple):
    """The sizes of a loop's state for a structure and block size, which shape its
    compiled program: S, the blocks, the state's rows (variables, then each layer's
    units) and the window widths. The degrees are not in it (`LoopTables` holds them,
    as the loop's inputs), so the MADEs of a flow, which differ in their orders only,
    share one program."""

    S: int
    n_blocks: int
    rows: tuple
    widths: tuple


class LoopTables:
    """Static (NumPy) tables of the loop for a structure and a block size S (1: step by step).

    Rows of the state: the variables (padded to ``n_blocks * S``), then for each layer
    its units, padded by one window so that no window is ever clamped. For each block
    and each of these (variables, layer 1, ...): where its window starts, how many of
    the window's rows become final in the block, and the window's (static) width.
    The sizes are `shape`; what depends on the degrees is given to the loop as tensors
    (`tensors`).
    """

    def __init__(self, structure: Structure, S: int):
        plan = structure.plan
        D = plan.event_size
        n_blocks = -(-D // S)
        ends = np.minimum(np.arange(n_blocks + 1) * S, D)
        self.starts, self.finals, widths = [ends[:-1]], [np.diff(ends)], [S]
        for offsets in plan.offsets:
            at = offsets[ends]
            self.starts.append(at[:-1])
            self.finals.append(np.diff(at))
            widths.append(max(1, int(np.max(self.finals[-1]))))
        rows = [n_blocks * S] + [h + w for h, w in zip(structure.hidden_units, widths[1:], strict=True)]
        self.shape = LoopShape(S, n_blocks, tuple(rows), tuple(widths))
        # Output rows of variable i are i * P ... i * P + P - 1, sorted by its degree.
        P = structure.params_per_dim
        self.out_cols = (plan.var_at[:, None] * P + np.arange(P)[None, :]).reshape(-1)
        self.var_at, self.unit_order, self.inverse_order = plan.var_at, plan.unit_order, np.argsort(plan.var_at)

    def tensors(self) -> dict:
        """What depends on the degrees, as int32 tensors, the inputs of a compiled
        sampler: the sort orders that lay the weights out (``var_at``, ``unit_order``,
        one per hidden layer, and ``out_cols``), each block's window ``starts`` and
        ``finals`` (one list entry per row group), and the ``inverse_order`` from degree
        order back to the variables' order."""
        as_tensor = lambda a: tf.constant(np.asarray(a, np.int32))  # noqa: E731
        return {"var_at": as_tensor(self.var_at), "unit_order": [as_tensor(a) for a in self.unit_order],
                "out_cols": as_tensor(self.out_cols), "starts": [as_tensor(a) for a in self.starts],
                "finals": [as_tensor(a) for a in self.finals], "inverse_order": as_tensor(self.inverse_order)}
