"""Long-lived processes: calls of every size trace and compile a bounded number of times.

Deterministic counts, no timings: the number of traces of the model's own functions and
of the sampler's graph, and the number of XLA programs, stay fixed however many batch
and sample sizes come; a seed fixes the samples whatever the chunking; a deleted model
leaves no strong reference, no traced graph and no registered gradient behind.
"""

from __future__ import annotations

import gc
import weakref

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import zoo_model

import tfp_maf
from tfp_maf import sampling
from tfp_maf._platform import compat
from tfp_maf.layers import sublayers
from tfp_maf.testing import randomize_weights

D, K = 5, 3
SIZES = [1, 7, 16, 33, 100, 257, 300, 2, 1000, 64, 5]


def _model(name, conditional=False):
    kw = dict(hidden_units=[16], num_components=2, num_layers=2)
    model = zoo_model(name, D, conditional_dims=K if conditional else None, **kw)
    for layer in model.layers:
        randomize_weights(layer, 0, scale=0.2)
    return model


def _traces(model) -> dict:
    return {key: f.experimental_get_tracing_count() for key, f in model.__dict__.get("_traced_calls", {}).items()}


def _mades(model) -> list:
    return [m for m in sublayers(model) if isinstance(m, tfp_maf.MADENetwork)]


def _programs(model) -> list:
    return [p for m in _mades(model) for p in sampling.compiled_programs(sampling.Structure.of(m)).values()]


def _tune(model, **tuning):
    for made in _mades(model):
        made.sampling_tuning = sampling.Tuning(**tuning)


@pytest.mark.parametrize("name, conditional",
                         [("maf5", False), ("made-mog", True), ("maf-mog5", True), ("nsf5", True)])
def test_calls_of_every_size_trace_and_compile_a_bounded_number_of_times(name, conditional):
    # Chunks of 16 rows: one chunk size to compile, and batches of many chunks.
    model = _model(name, conditional)
    _tune(model, chunk_rows=16)
    rng = np.random.default_rng(0)
    y_row = np.eye(K, dtype=np.float32)[1] if conditional else None
    for n in SIZES[:4]:  # warm-up: the first sizes may each trace
        model.sample(n, y=y_row)
        model.log_prob(rng.normal(size=(n, D)).astype(np.float32), None if y_row is None else np.tile(y_row, (n, 1)))
    traces = _traces(model)
    for n in SIZES[4:]:
        model.sample(n, y=y_row)
        model.log_prob(rng.normal(size=(n, D)).astype(np.float32), None if y_row is None else np.tile(y_row, (n, 1)))
    assert _traces(model) == traces and all(count <= 2 for count in traces.values()), traces
    mades = _mades(model)
    schedules = [sampling.Schedule.of(sampling.Structure.of(m), m.sampling_tuning or sampling.Tuning()) for m in mades]
    chunk_sizes = max(len(s.chunk_sizes) for s in schedules)
    now = _programs(model)
    assert all(graph <= 2 and xla <= chunk_sizes for graph, xla in now), now


@pytest.mark.parametrize("name", ["maf5", "nsf5"])
def test_a_seed_fixes_the_samples_whatever_the_chunking(name):
    model = _model(name)
    default = model.sample(300, seed=7).numpy()
    np.testing.assert_array_equal(model.sample(300, seed=7), default)  # an int seed is stateless
    again = _model(name)  # the same weights, a fresh sampler
    _tune(again, chunk_rows=16)
    np.testing.assert_allclose(again.sample(300, seed=7), default, rtol=1e-5, atol=1e-5)
    assert not np.allclose(model.sample(300, seed=8), default)


@pytest.mark.parametrize("name", ["maf5", "nsf5"])
def test_a_deleted_model_leaves_no_strong_reference(name):
    x = np.random.default_rng(1).normal(size=(100, D)).astype(np.float32)
    model = _model(name)
    model.compile(optimizer="adam")
    model.fit(x, batch_size=50, epochs=1, verbose=0)
    model.log_prob(x[:3])
    model.sample(4)
    ref = weakref.ref(model)
    del model
    keras.backend.clear_session()
    gc.collect()
    assert ref() is None


def _fit_use_and_delete(jit_compile):
    x = np.random.default_rng(1).normal(size=(100, D)).astype(np.float32)
    model = _model("maf5")
    model.compile(optimizer="adam", jit_compile=jit_compile)
    model.fit(x, batch_size=50, epochs=1, verbose=0)
    model.evaluate(x, batch_size=50, verbose=0)
    model.log_prob(x[:3])
    model.sample(4)
    del model
    keras.backend.clear_session()
    gc.collect()


@pytest.mark.parametrize("jit_compile", [False, True])
def test_a_deleted_model_leaves_no_traced_graph_behind(jit_compile):
    # What held them: TFP's bijector cache (entries now live on their graph), the
    # gradient functions tf.custom_gradient registers per trace (none left by a train
    # step), a compiled sampler per MADE (shared by MADEs of one structure now).
    def held():
        graphs = sum(isinstance(o, tf.Graph) for o in gc.get_objects())  # traced graphs are tf.Graphs
        return graphs, len(compat.gradient_registry())

    _fit_use_and_delete(jit_compile)  # the first model compiles the shared samplers
    before = held()
    _fit_use_and_delete(jit_compile)
    assert held() == before


def test_made_s_of_one_structure_share_their_compiled_sampler():
    first, second = _model("maf5"), _model("maf5")
    first.sample(5)
    programs = _programs(first)
    second.sample(5)
    assert _programs(second) == programs == _programs(first)


def test_the_mades_of_a_flow_share_one_xla_program_per_chunk_size():
    # Their orders differ (each layer reverses the one before), their sizes do not; the
    # orders are the loop's inputs, not part of its program. (Sizes no other test uses.)
    model = zoo_model("maf5", 6, hidden_units=[12], num_layers=3)
    _tune(model, chunk_rows=16)  # one chunk size
    assert len({sampling.Structure.of(m).key() for m in _mades(model)}) == 2  # two orders, alternating
    before = sampling.compiled_loops()
    model.sample(5)
    assert sampling.compiled_loops() == before + 1
    another = zoo_model("maf5", 6, hidden_units=[12], num_layers=3, seed=1)  # of the same sizes
    _tune(another, chunk_rows=16)
    another.sample(40)
    assert sampling.compiled_loops() == before + 1
