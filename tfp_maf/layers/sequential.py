"""Exact sequential passes through a MADE at the cost of about one forward pass.

Sampling from an autoregressive model sets x in order: the variable of degree t needs the
network's outputs for it, which depend on the variables of degree < t only. Re-running the
whole MADE at every step (what TFP, nflows, zuko and the paper's code do) costs D passes.

The masks say exactly which hidden units a step can change: a unit of degree k reads only
inputs (or units) of degree <= k, so its value is final once the variables of degree <= k
are set, and never changes afterwards. So at step t we compute

1. the outputs of the variable of degree t, from the last hidden layer's units of
   degree < t (all final), then set that variable;
2. in each hidden layer, the units of degree t, from the inputs / previous-layer units of
   degree <= t (all final).

Every unit and every output is computed once (up to the padding of blocks to one width):
about the work of one forward pass, spread over D steps. Units are kept sorted by degree
so that the units of degree t are a contiguous block of rows (the state is stored
transposed, units x batch), and the loop is compiled with XLA.

Done one step at a time, that work is D matrix-vector-like products, which run far below
a CPU's matmul throughput. So the steps go in blocks of S degrees:
what the rows that are already final contribute to a whole block is one matmul per
layer at the block's start (`_blocked_loop`), and only the block's own rows are updated step by step.
Blocks pay where D is large against the hidden layers (MNIST-like MADEs: blocks of 16);
small MADEs run step by step (`_block_steps`).

An XLA loop runs on one core, so on a CPU the batch is cut into one slice per core and
each slice's loop is its own call, independent of the others: TF's executor runs them
at once (`_in_parts`).

`sequential_pass` is shared by the Gaussian head (`MaskedAutoregressive` sampling) and the
mixture head (`MADEMoG` sampling); ``emit`` turns the outputs of one variable into its value.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import tensorflow as tf

from tfp_maf._graph_memory import traced_on_purpose

__all__ = ["SequentialPlan", "compiled_programs", "sequential_pass", "without_gradients"]


class SequentialPlan:
    """Static (NumPy) bookkeeping of a MADE's degrees: sort orders and block offsets.

    ``var_at[t]``: the variable of degree t + 1. For hidden layer l, ``unit_order[l]``
    sorts its units by degree and ``offsets[l][k]`` counts its units of degree <= k.
    """

    def __init__(self, input_degrees: np.ndarray, hidden_degrees: list[np.ndarray]):
        self.event_size = D = len(input_degrees)
        self.var_at = np.argsort(input_degrees, kind="stable")
        self.unit_order = [np.argsort(d, kind="stable") for d in hidden_degrees]
        self.offsets = [
            np.searchsorted(np.sort(d, kind="stable"), np.arange(D + 1), side="right").astype(np.int32)
            for d in hidden_degrees
        ]
        # What two plans compare by (`_Structure`): computed once, read at every pass.
        arrays = [self.var_at, *self.unit_order, *self.offsets]
        self.fingerprint = b"|".join(np.ascontiguousarray(a, np.int64).tobytes() for a in arrays)


class _Structure(NamedTuple):
    """What the compiled loops read of a MADE: its sizes, activation and degree
    bookkeeping, no weights and no layers. Two MADEs of one structure (the layers of a
    flow whose orders repeat, the same model built again in a sweep) share their
    compiled loops, and a loop keeps no model alive."""

    event_size: int
    hidden_units: tuple
    params_per_dim: int
    activation: Callable
    conditional_dims: int | None
    sequential_plan: SequentialPlan

    @classmethod
    def of(cls, made) -> _Structure:
        return cls(made.event_size, tuple(made.hidden_units), made.params_per_dim,
                   made.activation, made.conditional_dims, made.sequential_plan)

    def key(self) -> tuple:
        return (self.event_size, self.hidden_units, self.params_per_dim, self.activation,
                self.conditional_dims, self.sequential_plan.fingerprint)


#: ``(structure key, emit key, tuning) -> _Compiled``: the compiled samplers, shared by
#: MADEs of one structure. Bounded by the structures a process samples from; TF never
#: frees an XLA program anyway (its compilation cache has no eviction), so a program per
#: MADE would grow without bound in a process that builds model after model.
_COMPILED: dict = {}


_WITHOUT_GRADIENTS = threading.local()
_WITHOUT_GRADIENTS.active = False


@contextlib.contextmanager
def without_gradients():
    """Within it, `sequential_pass` gives samples that carry no gradient.

    `tf.custom_gradient`, which the differentiable path needs, registers a gradient
    function per trace in a registry TF never empties, and that function holds the
    traced graph: a process that traces samplers for many models (a sweep) keeps them
    all. Callers that only want values (`keras_models.DensityModel.sample`) trace under
    this instead.
    """
    before = getattr(_WITHOUT_GRADIENTS, "active", False)
    _WITHOUT_GRADIENTS.active = True
    try:
        yield
    finally:
        _WITHOUT_GRADIENTS.active = before


def sequential_pass(made, emit: Callable, noise, conditional_input=None, key=None):
    """Runs the MADE once over D steps, setting the variables in order.

    Args:
      made: a `tfp_maf.layers.MADE`.
      emit: ``emit(params, t, noise) -> (value, extra)``: ``params`` are the raw outputs
        of the variable of degree t + 1, shape ``[P, B]`` (P outputs per variable, in the
        MADE's layout); returns its value ``[B]`` and one more ``[B]`` quantity to keep
        (a log-scale, say).
      noise: a tensor or tuple of tensors whose first axis is the step (degree order) and
        second the batch, e.g. ``[D, B]``; passed to ``emit``.
      conditional_input: ``[B, K]`` or None.
      key: hashable; when given, the loop is compiled with XLA once per ``key`` (and
        input shapes) and reused. Callers pass the same ``emit`` for the same key.

    Returns:
      ``(x, extra)``, both ``[B, D]`` in the variables' own order.
    """
    if key is None:
        dtype = tf.nest.flatten(noise)[0].dtype
        return _loop_for(made, _read_weights(made), dtype)(emit, noise, conditional_input)
    # XLA runs the D-step loop with in-place row updates and fused small ops: a step
    # costs microseconds, where the graph executor's copies of the state cost ~1 ms.
    compiled = _compiled(made, emit, key).outer
    flat = tf.nest.flatten(noise)
    has_y = conditional_input is not None
    args = [*flat, conditional_input] if has_y else flat
    if _WITHOUT_GRADIENTS.active:
        frozen = lambda t: None if t is None else tf.stop_gradient(t)  # noqa: E731
        return compiled(tf.nest.map_structure(frozen, noise), frozen(conditional_input),
                        tf.nest.map_structure(frozen, _read_weights(made)))

    # Differentiating an XLA while loop from outside XLA fails (its per-step stack is a
    # TensorList), so the compiled loop gets only stop-gradient inputs, weights included,
    # and the backward pass differentiates the same loop run by TF.
    @tf.custom_gradient
    def run(*args):
        noise_args = tf.nest.pack_sequence_as(noise, list(args[: len(flat)]))
        y = args[-1] if has_y else None
        frozen = lambda t: None if t is None else tf.stop_gradient(t)  # noqa: E731
        out = compiled(tf.nest.map_structure(frozen, noise_args), frozen(y),
                       tf.nest.map_structure(frozen, _read_weights(made)))

        def grad(*upstream, variables=None):
            variables = list(variables or [])
            with tf.GradientTape() as tape:
                tape.watch(args)
                again = _loop_for(made, _read_weights(made), flat[0].dtype)(emit, noise_args, y)
            upstream = [tf.zeros_like(o) if g is None else g for o, g in zip(again, upstream, strict=True)]
            grads = tape.gradient(list(again), [*args, *variables], output_gradients=upstream)
            return grads[: len(args)], grads[len(args) :]

        return out, grad

    return run(*args)


#: State bytes per batch chunk: the step-by-step loop reads the whole state at every step,
#: so it should stay in cache (1 MiB); the blocked loop reads it once a block, and fewer,
#: larger chunks are faster (4 MiB: about 1.3x faster than 1 MiB or than no chunks for the
#: MNIST-like MADE of ``benchmarks/speed.py``, where 4 MiB is 1.4x slower step by step).
CHUNK_BYTES = {"stepwise": 1 << 20, "blocked": 1 << 22}


def _chunk_size(made, batch=None) -> int:
    """Batch rows per chunk so that one chunk's state (inputs and every hidden layer,
    float32) is about CHUNK_BYTES. No larger than a (static) batch."""
    width = made.event_size + sum(made.hidden_units)
    budget = CHUNK_BYTES["stepwise" if _block_steps(made) == 1 else "blocked"]
    chunk = int(max(32, 2 ** np.floor(np.log2(budget / (4 * width)))))
    return chunk if batch is None else max(1, min(chunk, int(batch)))


def _parts(made, batch: int | None) -> int:
    """How many slices of the batch `_in_parts` runs at once: one per CPU core, as
    many as there are chunks to share out; one on a GPU, which runs each step's ops
    over the whole batch in parallel already.

    An XLA loop runs on one core (XLA parallelises large ops, never loop iterations),
    so one call leaves the other cores idle; on this project's 2-core machines two
    parts sample config A of ``benchmarks/speed.py`` about 1.7x faster than one.
    """
    if tf.config.list_logical_devices("GPU"):
        return 1
    # The cores this process may run on (a container or taskset may allow fewer than the machine has).
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    # No more parts than inter-op threads to run them (0: TF's default, one per core).
    parts = min(cores, tf.config.threading.get_inter_op_parallelism_threads() or cores)
    if batch is not None:
        parts = max(1, min(parts, -(-int(batch) // _chunk_size(made, batch))))  # an empty batch: 1
    return parts


class _Loops:
    """The XLA-compiled D-step loop of one MADE structure and ``emit``, one function per chunk size
    (so each traces once: one XLA program per chunk size)."""

    def __init__(self, structure: _Structure, emit: Callable):
        self.structure, self.emit, self.by_chunk = structure, emit, {}

    def __call__(self, chunk: int) -> Callable:
        if chunk not in self.by_chunk:
            structure, emit = self.structure, self.emit
            self.by_chunk[chunk] = traced_on_purpose(
                lambda noise, y, prepared: _run_prepared(structure, emit, noise, y, prepared),
                jit_compile=True,
            )
        return self.by_chunk[chunk]

    def programs(self) -> int:
        return sum(f.experimental_get_tracing_count() for f in self.by_chunk.values())


class _Compiled(NamedTuple):
    """A compiled sampler for one structure and ``emit``: the graph over the whole batch,
    and the XLA loops it calls on one chunk at a time."""

    outer: Callable
    loops: _Loops


def _compiled_key(structure: _Structure, key) -> tuple:
    # The tuning that shapes the programs is part of the key (tests set it).
    return structure.key(), key, _block_steps(structure), tuple(_chunk_sizes(structure))


def _compiled(made, emit: Callable, key) -> _Compiled:
    """The shared compiled sampler of ``made``'s structure and ``emit`` (made once)."""
    structure = _Structure.of(made)
    full_key = _compiled_key(structure, key)
    if full_key not in _COMPILED:
        # One chunk of the batch a call, so that XLA compiles one program per chunk size
        # (`_chunk_sizes`: a few), not one per batch size: a notebook or a server asking
        # for samples of every size would otherwise compile (and keep) a program each time.
        loops = _Loops(structure, emit)
        # A graph (also when called eagerly), so that the parts' loops run at once; its
        # batch dimension relaxes to None on the second size, so it traces at most twice.
        outer = traced_on_purpose(
            lambda noise, y, weights: _sample_graph(structure, loops, noise, y, weights),
            reduce_retracing=True,
        )
        _COMPILED[full_key] = _Compiled(outer, loops)
    return _COMPILED[full_key]


def compiled_programs(made) -> dict:
    """``{key: (graph traces, XLA programs)}`` of the compiled samplers that ``made`` uses
    (shared with MADEs of its structure), one entry per ``emit`` (`sequential_pass`'s
    ``key``). Both stay bounded, whatever batch sizes are sampled: at most two traces of
    the graph (a static, then a relaxed batch size) and one XLA program per chunk size
    (`_chunk_sizes`). For tests and diagnostics."""
    structure = _Structure.of(made)
    return {
        full_key[1]: (c.outer.experimental_get_tracing_count(), c.loops.programs())
        for full_key, c in _COMPILED.items()
        if full_key[0] == structure.key()
    }


#: Batches up to this many rows run as one chunk of this size (`_chunk_sizes`).
SMALL_CHUNK = 64


def _chunk_sizes(made) -> list[int]:
    """The batch sizes the XLA loop is compiled for: SMALL_CHUNK rows for small batches,
    and the full chunk (`_chunk_size`), which larger batches are cut into. Two programs:
    each chunk size is a traced graph per MADE that the process keeps, and a batch of
    one padded to 64 rows costs about what one row does (the D steps' overhead)."""
    full = _chunk_size(made)
    return [SMALL_CHUNK, full] if SMALL_CHUNK < full else [full]


def _sample_graph(made, loops: _Loops, noise, conditional_input, weights):
    """The compiled pass over a batch of any size: the weights laid out once, the batch
    cut into chunks of one of `_chunk_sizes`, chosen at run time when the batch size is
    not static, each chunk a call of the XLA ``loop``."""
    first = tf.nest.flatten(noise)[0]
    prepared = _prepare_tensors(made, weights, first.dtype)
    sizes, static = _chunk_sizes(made), first.shape[1]

    def run(chunk):
        # Concurrent parts only for full chunks: a smaller batch fits in one.
        parts = _parts(made, static) if chunk == sizes[-1] else 1
        return _unless_empty(
            made, noise, lambda: _in_parts(made, loops(chunk), parts, chunk, noise, conditional_input, prepared)
        )

    if static is not None:
        return run(next((c for c in sizes if c >= static), sizes[-1]))
    index = tf.reduce_sum(tf.cast(tf.shape(first)[1] > tf.constant(sizes[:-1], tf.int32), tf.int32))
    return tf.switch_case(index, [lambda c=c: run(c) for c in sizes])


def _in_parts(made, loop, parts: int, chunk: int, noise, conditional_input, prepared):
    """`_chunked` on ``parts`` equal slices of the batch.

    The calls share no inputs or outputs, so TF's executor runs them concurrently,
    one per inter-op thread. Each slice is a whole number of chunks (the batch is
    zero-padded, the padding dropped).
    """
    if parts == 1:
        return _chunked(made, loop, chunk, noise, conditional_input, prepared)
    flat = tf.nest.flatten(noise)
    batch = tf.shape(flat[0])[1]
    unit = parts * chunk  # one chunk per part
    pad = (unit - batch % unit) % unit

    def split(t, axis):
        return tf.split(_pad_axis(t, axis, pad), parts, axis=axis)

    noises = list(zip(*[split(t, 1) for t in flat], strict=True))
    ys = [None] * parts if conditional_input is None else split(conditional_input, 0)
    outs = [
        _chunked(made, loop, chunk, tf.nest.pack_sequence_as(noise, list(n)), y, prepared)
        for n, y in zip(noises, ys, strict=True)
    ]
    return tuple(tf.concat(o, axis=0)[:batch] for o in zip(*outs, strict=True))


def _unless_empty(made, noise, run):
    """``run()``, or two ``[0, D]`` outputs for an empty batch (XLA cannot loop over none)."""
    first = tf.nest.flatten(noise)[0]
    empty = tf.zeros([0, made.event_size], first.dtype)
    batch = first.shape[1]
    if batch is not None:
        return (empty, empty) if batch == 0 else run()
    return tf.cond(tf.shape(first)[1] > 0, run, lambda: (empty, empty))


def _pad_axis(t, axis: int, pad):
    """``t`` with ``pad`` zeros appended along ``axis`` (the batch axis)."""
    return tf.pad(t, [[0, 0]] * axis + [[0, pad]] + [[0, 0]] * (t.shape.rank - axis - 1))


def _chunked(made, loop, chunk: int, noise, conditional_input, prepared):
    """The XLA ``loop`` over the batch in chunks of ``chunk`` rows, one after the other
    (the batch zero-padded to whole chunks, the padding dropped)."""
    flat = tf.nest.flatten(noise)
    batch = tf.shape(flat[0])[1]
    n_chunks = (batch + chunk - 1) // chunk
    pad = n_chunks * chunk - batch

    def split(t, axis):  # pad the batch axis, then chunks first: [n_chunks, ..., chunk, ...]
        t = _pad_axis(t, axis, pad)
        shape = tf.concat([tf.shape(t)[:axis], [n_chunks, chunk], tf.shape(t)[axis + 1 :]], 0)
        return tf.experimental.numpy.moveaxis(tf.reshape(t, shape), axis, 0)

    def static(t, axis):  # a chunk's shape, static, so that XLA sees one shape per chunk size
        return t.shape[:axis] + [chunk] + t.shape[axis + 1 :]

    elems = [split(t, 1) for t in flat]
    shapes = [static(t, 1) for t in flat]
    if conditional_input is not None:
        elems.append(split(conditional_input, 0))
        shapes.append(static(conditional_input, 0))

    def one_chunk(args):
        args = [tf.ensure_shape(a, s) for a, s in zip(args, shapes, strict=True)]
        noise_c = tf.nest.pack_sequence_as(noise, list(args[: len(flat)]))
        y_c = args[-1] if conditional_input is not None else None
        return loop(noise_c, y_c, prepared)

    dtype = flat[0].dtype
    x, extra = tf.map_fn(one_chunk, elems, fn_output_signature=(dtype, dtype), parallel_iterations=1)
    D = made.event_size
    return tf.reshape(x, [-1, D])[:batch], tf.reshape(extra, [-1, D])[:batch]


def _read_weights(made) -> dict:
    """The MADE's weights as tensors (masks applied), in one structure."""
    return {
        "hidden": [(layer.masked_kernel(), tf.convert_to_tensor(layer.bias)) for layer in made.hidden_layers],
        "output": (made.output_layer.masked_kernel(), tf.convert_to_tensor(made.output_layer.bias)),
        "conditional": [tf.convert_to_tensor(v) for v in made.conditional_kernels],
    }


MIN_BLOCK = 8


def _block_steps(made) -> int:
    """Steps per block (`_blocked_loop`): the largest power of two S whose in-block
    work, counted as ``P W_L + sum_l W_l W_(l-1)`` multiply-adds a step and sample
    (``W_0 = S``, ``W_l`` about ``S H_l / D`` units), stays under 1/8 of a forward pass;
    and 1 (no blocks) when that S is below MIN_BLOCK, where a block's bookkeeping costs
    more than its matmuls save. Measured on CPU with ``benchmarks/speed.py``: the
    MNIST-like MADE samples fastest with S = 16 (what this gives), the MINIBOONE-like
    one fastest step by step (blocks of 2: about 1.4x slower)."""
    D, P, hidden = made.event_size, made.params_per_dim, made.hidden_units
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


class _Layout:
    """Static (NumPy) tables of the blocked loop for a MADE and a block size S.

    Rows of the state: the variables (padded to ``n_blocks * S``), then for each layer
    its units, padded by one window so that no window is ever clamped. For each block
    and each of these (variables, layer 1, ...): where its window starts, how many of
    the window's rows become final in the block, and the window's (static) width.
    """

    def __init__(self, made, S: int):
        plan = made.sequential_plan
        D = plan.event_size
        self.S = S
        self.n_blocks = -(-D // S)
        ends = np.minimum(np.arange(self.n_blocks + 1) * S, D)
        self.starts, self.finals, self.widths = [ends[:-1]], [np.diff(ends)], [S]
        for offsets in plan.offsets:
            at = offsets[ends]
            self.starts.append(at[:-1])
            self.finals.append(np.diff(at))
            self.widths.append(max(1, int(np.max(self.finals[-1]))))
        self.rows = [self.n_blocks * S] + [h + w for h, w in zip(made.hidden_units, self.widths[1:], strict=True)]
        # Output rows of variable i are i * P ... i * P + P - 1, sorted by its degree.
        P = made.params_per_dim
        self.out_cols = (plan.var_at[:, None] * P + np.arange(P)[None, :]).reshape(-1)


def _prepare(made, weights, dtype, S: int) -> dict:
    """The weights in the loop's layout: [fan_out, fan_in] (transposed), rows and columns
    sorted by degree, zero-padded to the layout's rows."""
    plan, layout = made.sequential_plan, _Layout(made, S)
    rows, L = layout.rows, len(made.hidden_units)
    cast = lambda t: tf.cast(t, dtype)  # noqa: E731

    def sorted_padded(matrix, row_order, col_order, n_rows, n_cols):
        m = tf.transpose(tf.gather(tf.gather(cast(matrix), row_order, axis=0), col_order, axis=1))
        return tf.pad(m, [[0, n_rows - m.shape[0]], [0, n_cols - m.shape[1]]])

    def sorted_cols(matrix, col_order, n_cols):  # y's kernels: only the units are sorted
        m = tf.gather(cast(matrix), col_order, axis=1)
        return tf.pad(m, [[0, 0], [0, n_cols - m.shape[1]]])

    out = {"layout": layout, "kernels": [], "biases": [], "conditional": []}
    prev_order = plan.var_at
    for l, (kernel, bias) in enumerate(weights["hidden"]):
        order = plan.unit_order[l]
        out["kernels"].append(sorted_padded(kernel, prev_order, order, rows[l + 1], rows[l]))
        out["biases"].append(sorted_cols(bias[None], order, rows[l + 1])[0][:, None])
        prev_order = order
    n_out = layout.n_blocks * S * made.params_per_dim
    out_kernel, out_bias = weights["output"]
    out["out_w"] = sorted_padded(out_kernel, prev_order, layout.out_cols, n_out, rows[L])
    out["out_b"] = sorted_cols(out_bias[None], layout.out_cols, n_out)[0][:, None]
    # y feeds every hidden layer (the outputs when there is none). An unconditional
    # MADE has no y kernels: the second zip is then empty, not a mismatch.
    y_orders = [(o, r) for o, r in zip(plan.unit_order, rows[1:], strict=True)] or [(layout.out_cols, n_out)]
    y_kernels = weights["conditional"]
    out["conditional"] = [sorted_cols(v, o, r) for v, (o, r) in zip(y_kernels, y_orders, strict=bool(y_kernels))]
    return out


def _prepare_tensors(made, weights, dtype) -> dict:
    """The weights as the loop reads them, laid out once for every chunk of a call: for
    steps (`_stepwise_layout`), or for blocks (`_prepare`) without the static `_Layout`,
    which `_run_prepared` rebuilds (a tf.function argument must be tensors)."""
    S = _block_steps(made)
    if S == 1:
        return _stepwise_layout(made, weights, dtype)
    return {k: v for k, v in _prepare(made, weights, dtype, S).items() if k != "layout"}


def _run_prepared(made, emit, noise, conditional_input, prepared):
    """The D-step loop on weights from `_prepare_tensors`."""
    S = _block_steps(made)
    if S == 1:
        return _stepwise_loop(made, emit, noise, conditional_input, prepared)
    return _blocked_loop(made, emit, noise, conditional_input, {**prepared, "layout": _Layout(made, S)})


def _loop_for(made, weights, dtype) -> Callable:
    """``loop(emit, noise, conditional_input) -> (x, extra)`` over the D steps, for
    ``weights`` as `_read_weights`: `_stepwise_loop` when the MADE's blocks would be of
    one step (`_block_steps`), else `_blocked_loop` on weights laid out here, once."""
    S = _block_steps(made)
    if S == 1:
        prepared = _stepwise_layout(made, weights, dtype)
        return lambda emit, noise, y: _stepwise_loop(made, emit, noise, y, prepared)
    prepared = _prepare(made, weights, dtype, S)
    return lambda emit, noise, y: _blocked_loop(made, emit, noise, y, prepared)


def _loop_inputs(made, noise, conditional_input, weights):
    """dtype, batch size, and the (y @ V_l)^T terms in the loop's layout (or Nones)."""
    first = tf.nest.flatten(noise)[0]
    conds = [None] * max(len(made.hidden_units), 1)
    if conditional_input is not None:  # as `MADE.conditional_terms`
        y = tf.cast(conditional_input, first.dtype)
        conds = [tf.matmul(v, y, transpose_a=True, transpose_b=True) for v in weights["conditional"]]
    return first.dtype, tf.shape(first)[1], conds


def _in_variable_order(made, x_rows, extra_rows):
    """Back from (degree order, transposed) to [B, D] in the variables' order."""
    D, inverse_order = made.event_size, np.argsort(made.sequential_plan.var_at)
    return (tf.gather(tf.transpose(x_rows[:D]), inverse_order, axis=1),
            tf.gather(tf.transpose(extra_rows[:D]), inverse_order, axis=1))


def _stepwise_layout(made, weights, dtype) -> dict:
    """The weights as `_stepwise_loop` reads them (``weights`` as `_read_weights`): rows
    (fan-in) and columns (units) sorted by degree, then transposed, so that W_T[l] is
    [H_l, fan_in] and the units of one degree are a block of rows; y's kernels with
    their units sorted. Laid out once a call, not once a chunk."""
    plan, P = made.sequential_plan, made.params_per_dim
    cast = lambda t: tf.cast(t, dtype)  # noqa: E731
    prev_order = plan.var_at
    out = {"kernels": [], "biases": []}
    for l, (kernel, bias) in enumerate(weights["hidden"]):
        order = plan.unit_order[l]
        out["kernels"].append(tf.transpose(tf.gather(tf.gather(cast(kernel), prev_order, axis=0), order, axis=1)))
        out["biases"].append(tf.gather(cast(bias), order)[:, None])
        prev_order = order
    # Output columns of variable i are i * P ... i * P + P - 1; sort them by degree too.
    out_cols = (plan.var_at[:, None] * P + np.arange(P)[None, :]).reshape(-1)
    out_kernel, out_bias = weights["output"]
    out["out_w"] = tf.transpose(tf.gather(tf.gather(cast(out_kernel), prev_order, axis=0), out_cols, axis=1))
    out["out_b"] = tf.gather(cast(out_bias), out_cols)[:, None]
    # y feeds every hidden layer (the outputs when there is none).
    y_orders = plan.unit_order or [out_cols]
    y_kernels = weights["conditional"]  # none for an unconditional MADE
    out["conditional"] = [tf.gather(cast(v), o, axis=1) for v, o in zip(y_kernels, y_orders, strict=bool(y_kernels))]
    return out


def _stepwise_loop(made, emit, noise, conditional_input, prepared):
    """One step a degree (``prepared`` as `_stepwise_layout`). At step t: the outputs of
    the variable of degree t + 1, from the whole last layer (the masks read only its final
    units), then that variable; then in each layer the units of degree t + 1, from the
    whole layer below, in a window as wide as the most units of one degree.
    """
    plan = made.sequential_plan
    D, P = plan.event_size, made.params_per_dim
    L = len(made.hidden_units)
    first = tf.nest.flatten(noise)[0]
    dtype, batch_size = first.dtype, tf.shape(first)[1]
    kernels, biases = prepared["kernels"], prepared["biases"]
    out_w, out_b = prepared["out_w"], prepared["out_b"]  # [D * P, fan_in of the output layer]
    # (y @ V_l)^T, units sorted: as `MADE.conditional_terms`, in the loop's layout.
    conds = [None] * max(L, 1)
    if conditional_input is not None:
        y = tf.cast(conditional_input, dtype)
        conds = [tf.matmul(v, y, transpose_a=True, transpose_b=True) for v in prepared["conditional"]]
    out_c = conds[0] if L == 0 else None
    starts, widths = [], []
    for l in range(L):
        # Static shapes (for XLA): every step computes a window of the widest block's
        # size starting at its block. Extra units in the window are either final already
        # (recomputed to the same value) or of a later degree (overwritten at their own
        # step); the masks keep any reader from seeing them before they are final.
        offsets, units = plan.offsets[l], made.hidden_units[l]
        width = int(np.max(np.diff(offsets)))
        starts.append(tf.constant(np.minimum(offsets[:-1], units - width).astype(np.int32)))
        widths.append(width)
    fan_ins = [D, *made.hidden_units]

    def body(t, x_t, states, extra_t):
        # 1. Outputs of the variable of degree t + 1 (the masks read only final units),
        #    then its value.
        last = states[-1] if L else x_t
        rows = [t * P, 0]
        params = tf.matmul(tf.slice(out_w, rows, [P, fan_ins[-1]]), last) + tf.slice(out_b, rows, [P, 1])
        if out_c is not None:
            params += tf.slice(out_c, [t * P, 0], [P, batch_size])
        value, extra = emit(params, t, noise)
        extra_t = extra_t.write(t, extra)
        x_t = tf.tensor_scatter_nd_update(x_t, [[t]], value[None])
        # 2. Each hidden layer's units of degree t + 1, now final.
        new_states, prev = [], x_t
        for l in range(L):
            start, width = starts[l][t], widths[l]
            pre = tf.matmul(tf.slice(kernels[l], [start, 0], [width, fan_ins[l]]), prev)
            pre += tf.slice(biases[l], [start, 0], [width, 1])
            if conds[l] is not None:
                pre += tf.slice(conds[l], [start, 0], [width, batch_size])
            state = tf.tensor_scatter_nd_update(
                states[l], (start + tf.range(width))[:, None], made.activation(pre)
            )
            new_states.append(state)
            prev = state
        return t + 1, x_t, new_states, extra_t

    zeros = lambda rows: tf.zeros(tf.stack([rows, batch_size]), dtype)  # noqa: E731
    extra_rows = tf.TensorArray(dtype, size=D, element_shape=tf.TensorShape([None]))
    init = (tf.constant(0), zeros(D), [zeros(h) for h in made.hidden_units], extra_rows)
    _, x_t, _, extra_t = tf.while_loop(lambda t, *_: t < D, body, init, maximum_iterations=D)
    return _in_variable_order(made, x_t, extra_t.stack())


def _blocked_loop(made, emit, noise, conditional_input, weights):
    """The D steps in blocks of S consecutive degrees (``weights`` from `_prepare`).

    Invariant at the start of a block (steps s ... s + S - 1): the state holds every
    variable and unit of degree <= s, and zeros in every later row. A unit of a later
    degree reads (final) rows of degree <= s and rows of this block, so the block

    1. starts with ONE matmul per layer over the whole state: the contribution of the
       final rows to every output and unit of the block (a GEMM, S P or W_l rows tall);
    2. then, at each of its S steps, adds the contribution of its own rows, which is
       small next to the GEMMs;
    3. and ends by writing its final rows into the state (units of a later degree that
       share the window are zeroed, keeping the invariant).

    Rows and columns are sorted by degree and the state is transposed (units x batch),
    so that a block's rows are one contiguous slice.
    """
    D, P = made.event_size, made.params_per_dim
    L = len(made.hidden_units)
    layout = weights["layout"]
    S, rows, widths = layout.S, layout.rows, layout.widths
    dtype, batch_size, conds = _loop_inputs(made, noise, conditional_input, weights)
    kernels, biases, out_w, out_b = weights["kernels"], weights["biases"], weights["out_w"], weights["out_b"]
    out_c = conds[0] if L == 0 else None
    starts = [tf.constant(a.astype(np.int32)) for a in layout.starts]
    finals = [tf.constant(f.astype(np.int32)) for f in layout.finals]

    def block(k, states, extras, steps):
        """Block k: ``steps`` (static) steps from s = k S."""
        s = k * S
        # 1. What the final rows contribute to the block's outputs and units.
        out_rows = tf.slice(out_w, [s * P, 0], [S * P, rows[L]])
        base_out = tf.matmul(out_rows, states[L]) + tf.slice(out_b, [s * P, 0], [S * P, 1])
        if out_c is not None:
            base_out += tf.slice(out_c, [s * P, 0], [S * P, batch_size])
        base, blocks = [], []
        for l in range(L):
            start, width = starts[l + 1][k], widths[l + 1]
            unit_rows = tf.slice(kernels[l], [start, 0], [width, rows[l]])
            pre = tf.matmul(unit_rows, states[l]) + tf.slice(biases[l], [start, 0], [width, 1])
            if conds[l] is not None:
                pre += tf.slice(conds[l], [start, 0], [width, batch_size])
            base.append(pre)
            # The block's own rows below: its window of the previous layer.
            blocks.append(tf.slice(unit_rows, [0, starts[l][k]], [width, widths[l]]))
        out_block = tf.slice(out_rows, [0, starts[L][k]], [S * P, widths[L]])

        # 2. Its steps (unrolled: static slices, no inner loop), each adding what the
        #    block's own rows contribute. The new variable enters the first layer (or,
        #    without hidden layers, the outputs) as a rank-1 update; deeper windows are
        #    recomputed, since every unit of the window below may have changed.
        values, extra_rows, windows = [], [], [None] * L
        for j in range(steps):
            params = base_out[j * P : (j + 1) * P]
            if L and j:  # at j = 0 the block has no final units yet
                params += tf.matmul(out_block[j * P : (j + 1) * P], windows[-1])
            value, extra = emit(params, s + j, noise)
            values.append(value)
            extra_rows.append(extra)
            if L:
                base[0] = base[0] + blocks[0][:, j : j + 1] * value[None]
                windows[0] = made.activation(base[0])
                for l in range(1, L):
                    windows[l] = made.activation(base[l] + tf.matmul(blocks[l], windows[l - 1]))
            else:
                base_out = base_out + out_block[:, j : j + 1] * value[None]

        # 3. Write the final rows; units of later degrees in the windows stay zero.
        pad = lambda r: tf.pad(tf.stack(r), [[0, S - steps], [0, 0]])  # noqa: E731
        new_states = [tf.tensor_scatter_nd_update(states[0], (s + tf.range(S))[:, None], pad(values))]
        for l in range(L):
            keep = tf.range(widths[l + 1])[:, None] < finals[l + 1][k]
            window = tf.where(keep, windows[l], tf.zeros_like(windows[l]))
            new_states.append(tf.tensor_scatter_nd_update(
                states[l + 1], (starts[l + 1][k] + tf.range(widths[l + 1]))[:, None], window))
        extras = tf.tensor_scatter_nd_update(extras, (s + tf.range(S))[:, None], pad(extra_rows))
        return new_states, extras

    zeros = lambda n: tf.zeros(tf.stack([n, batch_size]), dtype)  # noqa: E731
    full, rest = divmod(D, S)
    _, states, extras = tf.while_loop(
        lambda k, *_: k < full, lambda k, *state: (k + 1, *block(k, *state, S)),
        (tf.constant(0), [zeros(n) for n in rows], zeros(rows[0])),
        maximum_iterations=full,
    )
    if rest:  # the last, shorter block
        states, extras = block(tf.constant(full), states, extras, rest)
    return _in_variable_order(made, states[0], extras)
