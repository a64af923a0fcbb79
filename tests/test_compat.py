"""`tfp_maf._platform.compat`: every private name it reads exists on the installed TF, TFP and
Keras (`.ci/run` runs this on both ends of the supported range), and importing
tfp-maf changes nothing of theirs."""

import json
import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

from tfp_maf._platform import compat as _compat

tfb, tfd = tfp.bijectors, tfp.distributions


def test_cache_util_has_the_cache_classes_our_bijectors_use():
    assert _compat.cache_util is not None
    from tfp_maf.bijectors.fused import FusedBijector

    # The greedy cache is in place: the log-det comes from the pass that gave the value.
    assert isinstance(FusedBijector._cache, _compat.cache_util.BijectorCacheWithGreedyAttrs)


def test_non_composite_classes_are_what_tfp_builds_for_parts_holding_layers():
    from tfp_maf import MADENetwork, MaskedAutoregressive

    maf = MaskedAutoregressive(MADENetwork(2, hidden_units=[4], seed=0), name="maf")
    chain, invert = tfb.Chain([maf]), tfb.Invert(maf)
    flow = tfd.TransformedDistribution(tfd.MultivariateNormalDiag(loc=np.zeros(2, np.float32)), chain)
    assert not isinstance(chain, tfb.Chain) and isinstance(chain, _compat.CHAIN_TYPES)
    assert type(chain) is _compat.NonCompositeChain
    assert not isinstance(invert, tfb.Invert) and isinstance(invert, _compat.INVERT_TYPES)
    assert isinstance(flow, _compat.TRANSFORMED_DISTRIBUTION_TYPES)
    # The public classes are recognised too.
    assert isinstance(tfb.Chain([tfb.Exp()]), _compat.CHAIN_TYPES)
    assert isinstance(tfb.Invert(tfb.Exp()), _compat.INVERT_TYPES)


def test_gradient_registry_holds_what_custom_gradient_registers():
    registry = _compat.gradient_registry()
    assert isinstance(registry, dict)
    before = set(registry)

    @tf.custom_gradient
    def double(x):
        return 2 * x, lambda dy: 2 * dy

    tf.function(lambda x: double(x)).get_concrete_function(tf.TensorSpec([], tf.float32))
    assert any(name.startswith("CustomGradient-") for name in set(registry) - before)


def test_custom_gradients_released_removes_what_a_trace_registered():
    from tfp_maf._platform.graph_memory import custom_gradients_released

    registry = _compat.gradient_registry()

    @tf.custom_gradient
    def double(x):
        return 2 * x, lambda dy: 2 * dy

    def step(x):
        with custom_gradients_released(), tf.GradientTape() as tape:
            tape.watch(x)
            y = double(x)
        return tape.gradient(y, x)

    before = set(registry)
    concrete = tf.function(step).get_concrete_function(tf.TensorSpec([], tf.float32))
    assert set(registry) == before
    assert float(concrete(tf.constant(1.0))) == 2.0


def test_retracing_flag_and_python_function_exist_on_tf_functions():
    def fn(x):
        return x

    function = tf.function(fn)
    assert _compat.python_function(function) is fn
    assert hasattr(function, "_omit_frequent_tracing_warning")
    _compat.omit_retracing_warning(function)
    assert function._omit_frequent_tracing_warning is True


def test_outermost_graph_climbs_out_of_loop_bodies():
    found = {}

    @tf.function
    def fn(x):
        outer = tf.compat.v1.get_default_graph()

        def body(i):
            found["body"] = _compat.outermost_graph(tf.compat.v1.get_default_graph()) is outer
            return i + 1

        found["top"] = _compat.outermost_graph(outer) is outer
        return tf.while_loop(lambda i: i < 3, body, [x])

    fn(tf.constant(0))
    assert found == {"body": True, "top": True}
    eager = tf.compat.v1.get_default_graph()
    assert _compat.outermost_graph(eager) is eager


def test_keras_tracks_sublayers_where_our_walk_looks():
    """`tfp_maf._platform.layer_tracking.sublayers` finds the layers a model holds in attributes and lists."""
    import keras_models as km
    from tfp_maf._platform.layer_tracking import sublayers

    model = km.MAF(3, hidden_units=[8], num_layers=2)
    names = {layer.name for layer in sublayers(model)}
    assert {"made_0", "made_1", "batch_norm_0", "batch_norm_1"} <= names
    assert len(sublayers(model)) == len({id(layer) for layer in sublayers(model)})
    assert sublayers(model, include_self=False)[0] is not model


_SNAPSHOT = textwrap.dedent(
    """
    import importlib.util, inspect, json, sys
    import keras, tensorflow as tf, tensorflow_probability as tfp

    # The compat module alone (it imports nothing of tfp-maf), to read TF's and TFP's
    # state before tfp-maf is imported. Importing tfp-maf runs it again: whatever it
    # changed at import, made anew, would differ from the first snapshot.
    spec = importlib.util.spec_from_file_location("compat_alone", sys.argv[1])
    compat = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(compat)

    def classes():
        spaces = [tf, tfp.bijectors, tfp.distributions, tfp.math, keras, keras.layers, keras.optimizers,
                  keras.saving, keras.callbacks, keras.metrics, keras.losses, keras.export]
        out = {}
        for space in spaces:
            for name, value in vars(space).items():
                if inspect.isclass(value):
                    out[f"{value.__module__}.{value.__qualname__}"] = value
        return out

    def snapshot():
        storage = compat.bijector_cache_storage()
        return {
            "bijector_cache_storage": [type(storage).__name__, id(storage)],
            "gradient_registry": sorted(compat.gradient_registry()),
            "class_attributes": {name: {k: id(v) for k, v in vars(cls).items()}
                                 for name, cls in sorted(classes().items())},
        }

    before = snapshot()
    import tfp_maf, keras_models  # noqa: F401, E401
    after = snapshot()
    changed = {key: before[key] != after[key] for key in before}
    changed_classes = sorted(name for name in before["class_attributes"]
                             if before["class_attributes"][name] != after["class_attributes"].get(name))
    print(json.dumps({"changed": changed, "classes": changed_classes,
                      "new_gradients": sorted(set(after["gradient_registry"]) - set(before["gradient_registry"]))}))
    """
)


def test_importing_tfp_maf_changes_nothing_of_tf_tfp_or_keras():
    out = subprocess.run([sys.executable, "-c", _SNAPSHOT, _compat.__file__], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["changed"] == {"bijector_cache_storage": False, "gradient_registry": False,
                                 "class_attributes": False}, report
    assert keras.__version__  # the snapshot covered the installed Keras


# -- Each entry's fallback: where the private name is missing, tfp-maf stays correct. ----

_WITHOUT_CACHE_UTIL = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import tensorflow_probability as tfp
    tfp.experimental, tfp.bijectors.Chain, tfp.distributions.Normal  # TFP loads lazily: load it all now
    # TFP's own modules hold cache_util already; from here on it cannot be imported,
    # as on a TFP release without it (its module's name: the compat entry's, argv[1]).
    package, _, name = sys.argv[1].rpartition(".")
    vars(sys.modules[package]).pop(name, None)
    sys.modules[sys.argv[1]] = None
    import keras_models as km
    from tfp_maf._platform import compat as _compat
    from tfp_maf._platform.bijector_cache import greedy_graph_only_cache
    from tfp_maf.testing import randomize_weights
    assert _compat.cache_util is None and greedy_graph_only_cache("f", "i") is None
    x = np.random.default_rng(0).normal(size=(64, 3)).astype(np.float32)
    model = km.MAF(3, hidden_units=[8], num_layers=2, seed=0)
    model.compile(optimizer="adam", jit_compile=False)
    model.fit(x, epochs=1, batch_size=32, verbose=0)
    randomize_weights(model, seed=1)
    for norm in model.norms:  # as the fresh model it is compared with: fit stored the data's
        norm.set_statistics(np.zeros(3), np.ones(3))
    print(json.dumps(np.asarray(model.log_prob(x[:5])).tolist()))
    """
)


def test_without_tfp_cache_util_the_flows_fall_back_to_tfps_cache_with_the_same_densities():
    out = subprocess.run([sys.executable, "-c", _WITHOUT_CACHE_UTIL, _compat.CACHE_UTIL_MODULE],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    fallback = json.loads(out.stdout.strip().splitlines()[-1])

    import keras_models as km
    from tfp_maf.testing import randomize_weights

    x = np.random.default_rng(0).normal(size=(64, 3)).astype(np.float32)
    model = km.MAF(3, hidden_units=[8], num_layers=2, seed=0)
    model.adapt(x)  # the statistics the script's fit took
    model(x[:1])
    randomize_weights(model, seed=1)
    np.testing.assert_allclose(fallback, model.log_prob(x[:5]), rtol=1e-5, atol=1e-5)


def test_without_the_gradient_registry_training_works_and_nothing_is_released(monkeypatch):
    import keras_models as km
    from tfp_maf._platform import graph_memory as _graph_memory

    monkeypatch.setattr(_graph_memory, "gradient_registry", lambda: None)
    x = np.random.default_rng(0).normal(size=(64, 3)).astype(np.float32)
    model = km.MAF(3, hidden_units=[8], num_layers=2, seed=0)
    model.compile(optimizer="adam", jit_compile=False)
    history = model.fit(x, epochs=2, batch_size=32, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))


def test_without_tf_function_internals_the_warning_is_kept_and_the_walk_stops():
    class NotATFFunction:
        pass

    function = NotATFFunction()
    _compat.omit_retracing_warning(function)  # no flag to set: nothing happens
    assert not hasattr(function, "_omit_frequent_tracing_warning")
    assert _compat.python_function(function) is None
    # A graph without ``outer_graph`` is its own outermost graph.
    assert _compat.outermost_graph(function) is function


def test_a_class_without_a_non_composite_base_is_recognised_as_itself():
    class Standalone(tfb.Bijector):
        pass

    assert _compat._non_composite_base(Standalone, tfb.Bijector) is Standalone
    assert _compat._non_composite_base(tfb.Exp, tfb.Composition) is tfb.Exp


def test_a_weights_file_without_optimizer_state_or_with_other_slot_names_loads_as_it_is(tmp_path):
    import h5py

    with h5py.File(tmp_path / "w.h5", "w") as h5:
        assert _compat.read_optimizer_arrays(h5) == []
        _compat.write_optimizer_arrays(h5, [np.zeros(2), np.ones(3)])
        assert [a.tolist() for a in _compat.read_optimizer_arrays(h5)] == [[0, 0], [1, 1, 1]]
        assert _compat.read_model_record(h5, "kernel_blocks") is None
    assert _compat.slot_of("made_dense_kernel_momentum", "made/dense/kernel") == "momentum"
    assert _compat.slot_of("iteration", "made/dense/kernel") is None
    assert _compat.slot_of("made_dense_kernel_", "made/dense/kernel") is None


def test_adam_slots_are_the_moments_keras_adam_updates():
    w = keras.Variable(np.ones(3, np.float32))
    adam = keras.optimizers.Adam(0.1)
    adam.apply([tf.constant([1.0, 2.0, 3.0])], [w])
    slots = _compat.adam_slots(adam, w)
    assert slots is not None
    m, v = slots
    np.testing.assert_allclose(m.numpy(), 0.1 * np.array([1.0, 2.0, 3.0]), rtol=1e-6)  # (1 - beta_1) g
    np.testing.assert_allclose(v.numpy(), 0.001 * np.array([1.0, 4.0, 9.0]), rtol=1e-5)  # (1 - beta_2) g^2
    assert _compat.adam_slots(keras.optimizers.SGD(0.1), w) is None  # the fallback's signal


def _traces_of_a_save(tmp_path, context) -> int:
    """How often `tf.saved_model.save` traces a function traced before it in ``context``."""
    traces = []

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
    def double(x):
        traces.append(1)
        return 2 * x

    root = tf.train.Checkpoint()
    root.double = double
    options = tf.saved_model.SaveOptions()
    with context(options):
        double.get_concrete_function()
    tf.saved_model.save(root, str(tmp_path), signatures={"double": double}, options=options)
    loaded = tf.saved_model.load(str(tmp_path))
    assert loaded.double(tf.constant([1.0])).numpy().tolist() == [2.0]
    return len(traces)


def test_a_function_traced_in_the_save_context_is_not_traced_again_by_the_save(tmp_path):
    assert _traces_of_a_save(tmp_path / "in", _compat.save_context) == 1


def test_without_the_save_context_the_save_traces_again_and_the_export_is_the_same(tmp_path, monkeypatch):
    import contextlib

    import keras_models as km

    assert _traces_of_a_save(tmp_path / "out", lambda options: contextlib.nullcontext()) == 2
    model = km.MAF(2, hidden_units=[4], num_layers=2, seed=0)
    x = np.array([[0.5, -1.0], [2.0, 0.0]], np.float32)
    monkeypatch.setattr(_compat, "save_context", lambda options: contextlib.nullcontext())
    model.export(str(tmp_path / "fallback"))
    loaded = tf.saved_model.load(str(tmp_path / "fallback"))
    np.testing.assert_allclose(loaded.log_prob(x), model.log_prob(x), rtol=1e-6)


def test_tf_serving_xla_switch_turns_xla_off_in_the_process_that_calls_it():
    """In a fresh process (it acts on the whole process): after the call, a function that
    must be XLA-compiled fails as it does in TF Serving; before it, it runs."""
    switch = _compat.tf_serving_xla_switch()
    assert switch, "TensorFlow's library exports no DisableXlaCompilation()"
    script = textwrap.dedent("""
        import ctypes, sys
        import tensorflow as tf
        add = tf.function(lambda x: x + 1.0, jit_compile=True)
        assert float(add(tf.constant(1.0))) == 2.0
        getattr(ctypes.CDLL(sys.argv[1]), sys.argv[2])()
        try:
            add(tf.constant([1.0, 2.0]))  # a new shape: a new compilation
        except tf.errors.InternalError as refused:
            assert "XLA compilation disabled" in str(refused), refused
        else:
            sys.exit("XLA still compiles")
    """)
    done = subprocess.run([sys.executable, "-c", script, *switch], capture_output=True, text=True,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


def test_op_determinism_can_be_turned_off_again():
    assert _compat.op_determinism_enabled() is False
    tf.config.experimental.enable_op_determinism()
    try:
        assert _compat.op_determinism_enabled() is True
    finally:
        assert _compat.disable_op_determinism()
    assert _compat.op_determinism_enabled() is False


def test_the_xla_attribute_and_tfps_cache_storage_are_where_the_entries_read_them():
    compiled = tf.function(lambda x: x + 1.0, jit_compile=True).get_concrete_function(tf.TensorSpec([], tf.float32))
    plain = tf.function(lambda x: x + 1.0).get_concrete_function(tf.TensorSpec([], tf.float32))
    assert compiled.function_def.attr[_compat.XLA_MUST_COMPILE_ATTRIBUTE].b
    assert not plain.function_def.attr[_compat.XLA_MUST_COMPILE_ATTRIBUTE].b
    assert _compat.bijector_cache_storage() is not None
