"""Runs a sequential pass: the compiled loop, shared per MADE size, over a batch of any size.

The loop (`tfp_maf.sampling.loops`) is compiled with XLA, which runs its D steps with
in-place row updates and fused small ops, where TensorFlow's executor copies the state at
every step: up to 4x faster at 1,000 rows (`benchmarks/sampling.py`). Around it:

- the batch is cut into chunks of one of a few sizes (`Schedule.chunk_sizes`), so that
  XLA compiles one program per chunk size, never one per batch size;
- on a CPU, slices of the batch run at once, one per core (`Schedule.parts_for`): an XLA
  loop runs on one core;
- the compiled sampler (the graph and its XLA programs) is kept per size, tuning and
  ``emit`` in `_COMPILED`, and closes over no model and no degrees (it takes those as
  inputs): the MADEs of a flow, which differ in their orders only, share it (a MAF (5)
  traces one graph and compiles one program per chunk size, not five), and since TF
  never frees an XLA program (its compilation cache has no eviction), a process that
  builds model after model of one size keeps no more;
- a differentiable pass runs the loop again under TF for its gradient (XLA's while loop
  cannot be differentiated from outside it), unless `without_gradients` says none is wanted;
- a graph meant for a runtime without XLA is traced within `without_xla`: the same loop,
  run by TensorFlow's executor (no chunks, no parts).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import tensorflow as tf

from tfp_maf._platform.graph_memory import traced_on_purpose
from tfp_maf.sampling.layout import lay_out
from tfp_maf.sampling.loops import run_loop
from tfp_maf.sampling.plan import LoopShape, LoopTables, Schedule, Structure, Tuning
from tfp_maf.trace_options import trace_options

__all__ = ["compiled_loops", "compiled_programs", "sequential_pass"]

#: ``(sizes key, emit key, schedule, loop shape) -> _Compiled``: shared by the MADEs of one size.
_COMPILED: dict = {}

def sequential_pass(structure: Structure, weights: dict, emit: Callable, noise, conditional_input=None,
                    key=None, tuning: Tuning | None = None):
    """Runs the MADE once over D steps, setting the variables in order.

    Args:
      structure: the MADE's `Structure`.
      weights: ``{"hidden": [(kernel, bias)], "output": (kernel, bias), "conditional":
        [V_l]}``, tensors with the masks applied (`tfp_maf.sampling.weights_of`).
      emit: ``emit(params, t, noise) -> (value, extra)``: ``params`` are the raw outputs
        of the variable of degree t + 1, shape ``[P, B]`` (P outputs per variable, in the
        MADE's layout); returns its value ``[B]`` and one more ``[B]`` quantity to keep
        (a log-scale, say).
      noise: a tensor or tuple of tensors whose first axis is the step (degree order) and
        second the batch, e.g. ``[D, B]``; passed to ``emit``.
      conditional_input: ``[B, K]`` or None.
      key: hashable; when given, the loop is compiled with XLA once per ``key`` and
        structure, and reused (unless within `without_xla`). Callers pass the same
        ``emit`` for the same key.
      tuning: block size, chunk rows and parts (`Tuning`; default: chosen from the sizes).

    Returns:
      ``(x, extra)``, both ``[B, D]`` in the variables' own order.
    """
    schedule = Schedule.of(structure, tuning or Tuning())
    layout = LoopTables(structure, schedule.block_steps)
    tables = layout.tensors()
    if key is None or not trace_options().xla:
        first = tf.nest.flatten(noise)[0]
        prepared = lay_out(structure, layout.shape, weights, first.dtype, tables)
        # No rows: TF's loop would scatter into an empty state, which it refuses (XLA's does not).
        rows = tf.shape(first)[1]
        known = tf.get_static_value(rows)
        if known is not None:
            if known == 0:
                return _no_rows(structure, first.dtype)
            return run_loop(structure, layout.shape, emit, noise, conditional_input, prepared, tables)
        # A batch of unknown size gets one zero row, dropped after, rather than a tf.cond
        # on its size: a cond's gradient holds FakeParam ops, which XLA cannot compile (the
        # gradient of an IAF's log_prob under jit_compile runs this pass).
        padded = tf.nest.map_structure(lambda t: _pad_axis(t, 1, 1), noise)
        y = None if conditional_input is None else _pad_axis(conditional_input, 0, 1)
        return tuple(o[:rows] for o in run_loop(structure, layout.shape, emit, padded, y, prepared, tables))
    outer = _compiled(structure.sizes(), schedule, layout.shape, emit, key).outer
    compiled = lambda noise_, y_, weights_: outer(noise_, y_, weights_, tables)  # noqa: E731
    frozen = lambda t: None if t is None else tf.stop_gradient(t)  # noqa: E731
    if not trace_options().gradients:
        return compiled(*tf.nest.map_structure(frozen, (noise, conditional_input, weights)))

    # The compiled loop gets stop-gradient inputs, and the backward pass differentiates
    # the same loop run by TF, with respect to the noise, y and the weights alike.
    inputs = (noise, conditional_input, weights)
    flat = [t for t in tf.nest.flatten(inputs) if t is not None]

    @tf.custom_gradient
    def run(*args):
        noise_, y_, weights_ = _unflatten(inputs, args)
        out = compiled(*tf.nest.map_structure(frozen, (noise_, y_, weights_)))

        def grad(*upstream):
            with tf.GradientTape() as tape:
                tape.watch(args)
                again = sequential_pass(structure, weights_, emit, noise_, y_, key=None, tuning=tuning)
            upstream = [tf.zeros_like(o) if g is None else g for o, g in zip(again, upstream, strict=True)]
            return tape.gradient(list(again), list(args), output_gradients=upstream)

        return out, grad

    return run(*flat)


def _no_rows(structure: Structure, dtype):
    """`sequential_pass`'s ``(x, extra)`` for a batch of no rows."""
    empty = tf.zeros([0, structure.event_size], dtype)
    return empty, empty


def _unflatten(inputs, args):
    """``inputs`` with its tensors replaced, in order, by ``args`` (Nones kept)."""
    it = iter(args)
    return tf.nest.map_structure(lambda t: None if t is None else next(it), inputs)


class _Compiled(NamedTuple):
    """A compiled sampler for one size, schedule and ``emit``: the graph over the whole
    batch, and the XLA loops it calls on one chunk at a time (one per chunk size, so
    each traces once). Both take the degrees' tables as inputs."""

    outer: Callable
    loops: dict


def _compiled(sizes: Structure, schedule: Schedule, shape: LoopShape, emit: Callable, key) -> _Compiled:
    """The shared compiled sampler of ``sizes`` (a `Structure` without its degrees),
    ``schedule``, ``shape`` and ``emit``: made once, whatever the MADE's orders."""
    full_key = (sizes.key(), key, schedule, shape)
    if full_key not in _COMPILED:
        loops = {
            chunk: traced_on_purpose(
                lambda noise, y, prepared, tables: run_loop(sizes, shape, emit, noise, y, prepared, tables),
                jit_compile=True)
            for chunk in schedule.chunk_sizes
        }
        # A graph (also when called eagerly), so that the parts' loops run at once; its
        # batch dimension relaxes to None on the second size, so it traces at most twice.
        outer = traced_on_purpose(
            lambda noise, y, weights, tables: _sample_graph(sizes, schedule, shape, loops, noise, y, weights, tables),
            reduce_retracing=True,
        )
        _COMPILED[full_key] = _Compiled(outer, loops)
    return _COMPILED[full_key]


def compiled_loops() -> int:
    """How many XLA programs of the loops this process holds: one per MADE size,
    ``emit`` and chunk size sampled so far, however many MADEs of those sizes (TF
    never frees them). For tests and diagnostics."""
    return sum(f.experimental_get_tracing_count() for c in _COMPILED.values() for f in c.loops.values())


def compiled_programs(structure: Structure) -> dict:
    """``{key: (graph traces, XLA programs)}`` of the compiled samplers of ``structure``,
    one entry per ``emit`` key and schedule. Both stay bounded, whatever batch sizes are
    sampled: at most two traces of the graph (a static, then a relaxed batch size) and
    one XLA program per chunk size (shared with the structures of the same sizes). For
    tests and diagnostics."""
    return {
        full_key[1:]: (c.outer.experimental_get_tracing_count(),
                       sum(f.experimental_get_tracing_count() for f in c.loops.values()))
        for full_key, c in _COMPILED.items()
        if full_key[0] == structure.sizes().key()
    }


def _sample_graph(structure, schedule, shape, loops, noise, conditional_input, weights, tables):
    """The pass over a batch of any size: the weights laid out once, the batch cut into
    chunks of one of the schedule's sizes, chosen at run time when the batch size is not
    static, each chunk a call of its XLA loop."""
    first = tf.nest.flatten(noise)[0]
    prepared = lay_out(structure, shape, weights, first.dtype, tables)
    sizes, static = schedule.chunk_sizes, first.shape[1]

    def run(chunk):
        loop = lambda noise_c, y_c, prepared_: loops[chunk](noise_c, y_c, prepared_, tables)  # noqa: E731
        # A chunk size below the largest is chosen only for a batch that fits in one
        # chunk: one call of its loop, without the loop over chunks.
        # An empty batch padded to a chunk is rows like any other: no guard at run time.
        if chunk != sizes[-1] or (static is not None and static <= chunk):
            return _unless_empty(structure, noise, lambda: _one_chunk(
                loop, chunk, noise, conditional_input, prepared), may_be_empty=False)
        # Concurrent parts only for full chunks: a smaller batch fits in one. Only the
        # first size can meet an empty batch.
        parts = schedule.parts_for(static)
        return _unless_empty(structure, noise, lambda: _in_parts(
            structure, loop, parts, chunk, noise, conditional_input, prepared), may_be_empty=chunk == sizes[0])

    if static is not None:
        return run(next((c for c in sizes if c >= static), sizes[-1]))
    index = tf.reduce_sum(tf.cast(tf.shape(first)[1] > tf.constant(sizes[:-1], tf.int32), tf.int32))
    return tf.switch_case(index, [lambda c=c: run(c) for c in sizes])


def _in_parts(structure, loop, parts: int, chunk: int, noise, conditional_input, prepared):
    """`_chunked` on ``parts`` equal slices of the batch.

    The calls share no inputs or outputs, so TF's executor runs them concurrently,
    one per inter-op thread. Each slice is a whole number of chunks (the batch is
    zero-padded, the padding dropped).
    """
    if parts == 1:
        return _chunked(structure, loop, chunk, noise, conditional_input, prepared)
    flat = tf.nest.flatten(noise)
    batch = tf.shape(flat[0])[1]
    unit = parts * chunk  # one chunk per part
    pad = (unit - batch % unit) % unit

    def split(t, axis):
        return tf.split(_pad_axis(t, axis, pad), parts, axis=axis)

    noises = list(zip(*[split(t, 1) for t in flat], strict=True))
    ys = [None] * parts if conditional_input is None else split(conditional_input, 0)
    outs = [
        _chunked(structure, loop, chunk, tf.nest.pack_sequence_as(noise, list(n)), y, prepared)
        for n, y in zip(noises, ys, strict=True)
    ]
    return tuple(tf.concat(o, axis=0)[:batch] for o in zip(*outs, strict=True))


def _unless_empty(structure, noise, run, may_be_empty: bool):
    """``run()``, or two ``[0, D]`` outputs for an empty batch (XLA cannot loop over
    none): decided when traced for a static batch size, else at run time where the batch
    ``may_be_empty`` (a run-time guard is a branch of its own for TF to optimise)."""
    first = tf.nest.flatten(noise)[0]
    empty = tf.zeros([0, structure.event_size], first.dtype)
    batch = first.shape[1]
    if batch is not None:
        return (empty, empty) if batch == 0 else run()
    if not may_be_empty:
        return run()
    return tf.cond(tf.shape(first)[1] > 0, run, lambda: (empty, empty))


def _pad_axis(t, axis: int, pad):
    """``t`` with ``pad`` zeros appended along ``axis`` (the batch axis)."""
    return tf.pad(t, [[0, 0]] * axis + [[0, pad]] + [[0, 0]] * (t.shape.rank - axis - 1))


def _chunk_shape(t, axis: int, chunk: int):
    """``t``'s static shape with ``chunk`` rows on ``axis``: XLA sees one shape per chunk size."""
    return t.shape[:axis] + [chunk] + t.shape[axis + 1 :]


def _one_chunk(loop, chunk: int, noise, conditional_input, prepared):
    """The XLA ``loop`` once, on the batch zero-padded to ``chunk`` rows (a batch of at
    most ``chunk`` rows), the padding dropped: what `_chunked` computes for one chunk."""
    flat = tf.nest.flatten(noise)
    batch = tf.shape(flat[0])[1]
    pad = chunk - batch

    def padded(t, axis):
        return tf.ensure_shape(_pad_axis(t, axis, pad), _chunk_shape(t, axis, chunk))

    noise_c = tf.nest.pack_sequence_as(noise, [padded(t, 1) for t in flat])
    y_c = None if conditional_input is None else padded(conditional_input, 0)
    x, extra = loop(noise_c, y_c, prepared)
    return x[:batch], extra[:batch]


def _chunked(structure, loop, chunk: int, noise, conditional_input, prepared):
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

    elems = [split(t, 1) for t in flat]
    shapes = [_chunk_shape(t, 1, chunk) for t in flat]
    if conditional_input is not None:
        elems.append(split(conditional_input, 0))
        shapes.append(_chunk_shape(conditional_input, 0, chunk))

    def one_chunk(args):
        args = [tf.ensure_shape(a, s) for a, s in zip(args, shapes, strict=True)]
        noise_c = tf.nest.pack_sequence_as(noise, list(args[: len(flat)]))
        y_c = args[-1] if conditional_input is not None else None
        return loop(noise_c, y_c, prepared)

    dtype = flat[0].dtype
    x, extra = tf.map_fn(one_chunk, elems, fn_output_signature=(dtype, dtype), parallel_iterations=1)
    D = structure.event_size
    return tf.reshape(x, [-1, D])[:batch], tf.reshape(extra, [-1, D])[:batch]
