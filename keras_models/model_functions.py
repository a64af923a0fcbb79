"""`tf.function`s kept on a model: its steps outside `fit`, `evaluate` and `predict`
(``log_prob``, ``sample``, the batch norms' statistics), traced once per model, and the
rows one call of them maps where a user's call is mapped in parts (an eager ``log_prob``
or ``sample_from_noise`` of many rows)."""

from __future__ import annotations

import tensorflow as tf

from tfp_maf.tracing import traced_on_purpose

__all__ = ["CALL_ROWS", "CALL_VALUES", "SAMPLE_FACTOR", "by_parts", "has_model_function", "in_parts",
           "model_function", "noise_in_parts", "rows_per_call", "sample_rows_per_call", "traced_log_prob"]

#: Values (rows times D) per call of a model's traced function where a call of the user's
#: is mapped in parts (an eager ``log_prob``, the batch norms' statistics pass) ...
CALL_VALUES = 2**21
#: ... and at most this many rows (a small D's rows still go through wide hidden layers).
CALL_ROWS = 10_000
#: ``sample_from_noise`` takes this many times as many rows a call: a call of the sampler
#: costs more before its first row (30,000 MNIST samples from a MAF (5), 2 cores: 1.23x to
#: 1.39x the time of one call in parts of 2,674 rows, 1.05x to 1.14x in parts of 10,696).
SAMPLE_FACTOR = 4


def sample_rows_per_call(event_size: int) -> int:
    """Rows per call of a model's traced ``sample_from_noise``: `rows_per_call` times
    `SAMPLE_FACTOR`.

    >>> sample_rows_per_call(784)
    10696
    """
    return rows_per_call(event_size) * SAMPLE_FACTOR


def rows_per_call(event_size: int) -> int:
    """Rows per call of a model's traced function for ``event_size`` values a row: about
    `CALL_VALUES` values, at most `CALL_ROWS` rows.

    A call's temporary memory grows with its rows (every layer's outputs for every row
    at once: an MNIST MAF (5) at 10,000 rows holds about 350 MiB more), its speed not
    beyond a few thousand rows (the matmuls are as fast at 1,000 rows as at 10,000, 2
    cores).

    >>> rows_per_call(784), rows_per_call(6)
    (2674, 10000)
    """
    return min(CALL_ROWS, max(1, CALL_VALUES // max(1, int(event_size))))


def model_function(model, name: str, y, fn, x=None, input_signature=None):
    """``fn`` as a `tf.function` kept on ``model``, one per ``name`` and rank of ``y``
    and of ``x`` where given (a relaxed rank would leave the layers' widths unknown).
    Its batch dimension relaxes to None on the second size: at most two traces each;
    with an ``input_signature``, one trace for it. The functions go with the model."""
    cache = model.__dict__.setdefault("_traced_calls", {})  # not a Keras-tracked attribute
    key = (name, None if y is None else y.shape.rank, None if x is None else x.shape.rank)
    if key not in cache:  # (traced_on_purpose: without AutoGraph, which could not parse these lambdas)
        cache[key] = (traced_on_purpose(fn, reduce_retracing=True) if input_signature is None
                      else traced_on_purpose(fn, input_signature=input_signature))
    return cache[key]


def has_model_function(model, name: str) -> bool:
    """Whether ``model`` keeps a `model_function` of ``name`` (of any rank)."""
    return any(key[0] == name for key in model.__dict__.get("_traced_calls", {}))


def traced_log_prob(model, x, y) -> tf.Tensor:
    """``model.log_prob(x, y)`` of checked inputs by the model's one traced function of
    it (per rank of ``x`` and ``y``). The test and predict steps, the validation of the
    batch-norm statistics pass and the user's eager calls share its trace (each trace
    costs about 0.2 s for a MAF (5), 2 cores)."""
    return model_function(model, "log_prob", y, model.log_prob, x=x)(x, y)


def in_parts(fn, x, y, batch, rows: int) -> tf.Tensor:
    """``fn(x, y)``, a value per element of ``batch`` (the shape ``x`` and ``y`` broadcast
    to, known: eager tensors), computed ``rows`` rows a call at most."""
    n = batch.num_elements()
    if n <= rows:
        return fn(x, y)

    def rows_of(t):  # [n, width]; a copy only where t has fewer rows than the batch
        if t.shape[:-1] != batch:
            t = tf.broadcast_to(t, batch + t.shape[-1:])
        return tf.reshape(t, [n, -1])

    x, y = rows_of(x), None if y is None else rows_of(y)
    values = by_parts(lambda start, stop, _: fn(x[start:stop], None if y is None else y[start:stop]), n, rows)
    return tf.reshape(values, batch)


def by_parts(call, n: int, rows: int) -> tf.Tensor:
    """``call(start, stop, part)``, the values of rows ``start`` to ``stop`` of ``n``,
    for consecutive parts of at most ``rows`` rows (``part`` counts them from 0),
    concatenated along the first axis."""
    return tf.concat([call(start, min(start + rows, n), part) for part, start in enumerate(range(0, n, rows))], 0)


def noise_in_parts(from_noise, noise, y, gumbel, rows: int) -> tf.Tensor:
    """``from_noise(noise, y, gumbel)``, a model's traced ``sample_from_noise``, at most
    ``rows`` rows of ``noise`` ``[n, D]`` a call (`sample_rows_per_call`),
    with their rows of ``gumbel`` and, where it has one per row, of ``y`` (a single row
    ``[1, K]`` goes to every part)."""
    n = noise.shape[0] if noise.shape.rank == 2 else 0
    if n <= rows:
        return from_noise(noise, y, gumbel)
    per_row = y is not None and y.shape.rank == 2 and y.shape[0] == n
    return by_parts(lambda start, stop, _: from_noise(
        noise[start:stop], y[start:stop] if per_row else y, None if gumbel is None else gumbel[start:stop]), n, rows)
