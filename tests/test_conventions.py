"""What a Keras or TFP user writes first, without reading our docs, must just work.

Every zoo model, float32 and float64, unconditional and conditional, NumPy and tensor
inputs: `model.distribution(y)` as a TFP distribution, Keras' `fit` / `evaluate` /
`predict` in their input forms, `.keras` and `model.export`, edge inputs, dtype
policies; hand-built TFP chains with NumPy ``y``; and the command line a person runs.
(TFP's ``bijector_test_util`` is not in its wheel; `tfp_maf.testing` holds the same
two checks, bijective-and-finite and log-dets against autodiff, which
``test_bijectors.py`` walks every bijector through.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp
from conftest import zoo_model

import keras_models as km
import tfp_maf
from keras_models.optimizers import FusedAdam
from keras_models.zoo import MODELS
from tfp_maf.testing import randomize_weights

tfd, tfb = tfp.distributions, tfp.bijectors
D, K = 3, 2
NAMES = sorted(MODELS)
# maf10 and realnvp10 are MAF and RealNVP with more layers, and `_model` gives every flow
# two: maf5 and realnvp5 cover their classes.
CLASSES = [n for n in NAMES if n not in ("maf10", "realnvp10")]
DTYPES = ["float32", "float64"]
# Every class in float32, with and without y; float64 on the conditional models, where x, y
# and every layer take the model's dtype (the unconditional path is the float32 cells').
DTYPE_CELLS = [pytest.param(name, conditional, dtype,
                            id=f"{name}-{'conditional' if conditional else 'unconditional'}-{dtype}")
               for name in CLASSES for conditional in (False, True) for dtype in DTYPES
               if conditional or dtype == "float32"]


def _model(name, conditional, dtype="float32"):
    kw = dict(hidden_units=[8], num_components=2, num_layers=2)
    model = zoo_model(name, D, conditional_dims=K if conditional else None, dtype=dtype, **kw)
    for layer in model.layers:
        randomize_weights(layer, 0, scale=0.2)  # not the identity the flows start as
    return model


def _data(conditional, dtype="float32", n=40, seed=0):
    rng = np.random.RandomState(seed)
    x = (rng.normal(size=(n, D)) * [1.0, 0.5, 2.0]).astype(dtype)
    y = np.eye(K, dtype=dtype)[rng.randint(0, K, n)] if conditional else None
    return x, y


def _close(a, b, dtype):
    tol = 1e-4 if dtype == "float32" else 1e-9
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


@pytest.mark.parametrize(("name", "conditional", "dtype"), DTYPE_CELLS)
def test_distribution_is_bound_to_y(name, conditional, dtype):
    model = _model(name, conditional, dtype)
    x, y = _data(conditional, dtype)
    if name == "gaussian":
        model.fit_closed_form(x, y)
    # NumPy inputs, then tensors, through one model: its traces serve both.
    for as_tensor in (False, True):
        if as_tensor:
            x, y = tf.constant(x), None if y is None else tf.constant(y)
        _check_distribution_bound_to_y(model, name, x, y, dtype, conditional)


def _check_distribution_bound_to_y(model, name, x, y, dtype, conditional):
    d = model.distribution(y)
    log_p = d.log_prob(x)  # no keywords: y is bound
    assert log_p.dtype == dtype and log_p.shape == [len(x)]
    _close(log_p, model.log_prob(x, y), dtype)
    _close(d.prob(x), np.exp(log_p), dtype)
    batch = [] if y is None else [len(x)]
    assert d.sample(seed=1).shape == [*batch, D]  # one x per row of y
    assert d.sample(2, seed=1).shape == [2, *batch, D]
    if name != "gaussian":  # TFP's MixtureSameFamily has no joint sample-and-log-prob
        s, lp = d.experimental_sample_and_log_prob(seed=2)
        assert s.shape == [*batch, D] and s.dtype == dtype
        _close(lp, d.log_prob(s), dtype)
    if conditional:  # one row of y: p(x | y) for every x
        _close(model.distribution(y[0]).log_prob(x[:3]), model.log_prob(x[:3], y[0]), dtype)


@pytest.mark.parametrize("name", ["maf5", "realnvp5", "maf-mog5"])
def test_distribution_training_flag_reaches_the_batch_norms(name):
    model = _model(name, conditional=True)
    x, y = _data(True)
    training, inference = model.distribution(y, training=True), model.distribution(y)
    _close(training.log_prob(x), model.log_prob(x, y, training=True), "float32")
    assert not np.allclose(training.log_prob(x), inference.log_prob(x))


@pytest.mark.parametrize(("name", "conditional", "dtype"), DTYPE_CELLS)
def test_keras_lifecycle_in_the_models_dtype(name, conditional, dtype, tmp_path):
    """fit, evaluate, predict, sample, .keras and model.export, all in ``dtype``, on a
    `tf.data.Dataset` (arrays: `test_a_float64_model_fed_arrays_sees_float64`)."""
    model = _model(name, conditional, dtype)
    x, y = _data(conditional, dtype)
    inputs = x if y is None else (x, y)
    ds = tf.data.Dataset.from_tensor_slices(inputs).batch(20)
    if name == "gaussian":
        model.fit_closed_form(x, y)
        model.compile(jit_compile=False)  # to evaluate: nothing trains
    else:
        model.compile(optimizer=FusedAdam(1e-3), jit_compile=False)
        history = model.fit(ds, epochs=1, verbose=0)
        assert np.isfinite(history.history["loss"][-1])
    assert {v.dtype for v in model.weights} == {dtype}
    log_p = model.log_prob(x, y)
    assert log_p.dtype == dtype
    _close(model.predict(ds, verbose=0), log_p, dtype)
    _close(model.evaluate(ds, verbose=0), -np.mean(log_p), dtype)
    samples = model.sample(4, y=None if y is None else y[0], seed=1)
    assert samples.shape == [4, D] and samples.dtype == dtype

    model.save(tmp_path / "m.keras")
    _close(keras.saving.load_model(tmp_path / "m.keras").log_prob(x, y), log_p, dtype)

    model.export(str(tmp_path / "served"))
    served = keras.layers.TFSMLayer(str(tmp_path / "served"), dtype=dtype)  # Keras' own reload
    _close(served(inputs), log_p, dtype)
    loaded = tf.saved_model.load(str(tmp_path / "served"))
    _close(loaded.log_prob(*([x] if y is None else [x, y])), log_p, dtype)
    drawn = loaded.sample(tf.constant(3), tf.constant([1, 2]), *([] if y is None else [y[0]]))
    assert drawn.shape == [3, D] and drawn.dtype == dtype


def test_every_keras_input_form_of_a_conditional_model():
    x, y = _data(True, n=60)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(20)
    model = _model("maf5", conditional=True)
    model.compile(optimizer=FusedAdam(1e-3), jit_compile=False)
    fits = [
        lambda: model.fit(x, y, batch_size=20, epochs=1, verbose=0),
        lambda: model.fit((x, y), batch_size=20, epochs=1, verbose=0),
        lambda: model.fit(ds, epochs=1, verbose=0),
        lambda: model.fit(x, y, batch_size=20, epochs=1, verbose=0, validation_data=(x, y)),
        lambda: model.fit(x, y, batch_size=20, epochs=1, verbose=0, validation_data=((x, y),)),
        lambda: model.fit(ds, epochs=1, verbose=0, validation_data=ds),
        lambda: model.fit(x, y, batch_size=20, epochs=1, verbose=0, validation_split=0.25),
        lambda: model.fit((x, y), batch_size=20, epochs=1, verbose=0, validation_split=0.25),
    ]
    for fit in fits:
        assert all(np.isfinite(v[-1]) for v in fit().history.values())
    expected = -np.mean(model.log_prob(x, y))
    for form in [lambda: model.evaluate(x, y, batch_size=20, verbose=0),
                 lambda: model.evaluate((x, y), batch_size=20, verbose=0),
                 lambda: model.evaluate(ds, verbose=0)]:
        np.testing.assert_allclose(form(), expected, rtol=1e-5)
    np.testing.assert_allclose(model.predict((x, y), batch_size=20, verbose=0), model.log_prob(x, y), rtol=1e-5)
    np.testing.assert_allclose(model.predict(ds, verbose=0), model.log_prob(x, y), rtol=1e-5)


@pytest.mark.parametrize("conditional", [False, True], ids=["unconditional", "conditional"])
def test_everything_runs_under_tf_functions_run_eagerly(conditional):
    """``tf.config.run_functions_eagerly(True)``, how a user steps through TF code in a
    debugger: an eager ``log_prob`` called the model's traced function of itself, which
    then ran eagerly and called it again, until Python's recursion limit."""
    x, y = _data(conditional, n=60)
    args = (x,) if y is None else (x, y)
    model = _model("maf5", conditional)
    expected = model.distribution(None if y is None else y).log_prob(x).numpy()
    tf.config.run_functions_eagerly(True)
    try:
        np.testing.assert_allclose(model.log_prob(*args), expected, rtol=1e-5)
        model.compile(optimizer=FusedAdam(1e-3))
        model.fit(*args, batch_size=20, epochs=1, verbose=0)
        log_p = model.log_prob(*args).numpy()
        np.testing.assert_allclose(model.evaluate(*args, batch_size=20, verbose=0), -np.mean(log_p), rtol=1e-5)
        np.testing.assert_allclose(model.predict(args if y is not None else x, batch_size=20, verbose=0), log_p,
                                   rtol=1e-5)
        assert model.sample(3, None if y is None else y[0], seed=1).shape == [3, D]
        assert model.sample_from_noise(x[:3], None if y is None else y[:3]).shape == [3, D]
    finally:
        tf.config.run_functions_eagerly(False)


@pytest.mark.parametrize("name", CLASSES)
def test_log_prob_takes_any_batch_rank_in_any_order(name):
    # One traced function per rank of x: a relaxed rank (NSF's splines) once broke the
    # model for good after a [D] call met an [N, D] one.
    x, _ = _data(False, n=6)
    model = _model(name, False)
    expected = model.distribution().log_prob(x).numpy()
    for _ in range(2):
        np.testing.assert_allclose(model.log_prob(x[0]), expected[0], rtol=1e-5)
        np.testing.assert_allclose(model.log_prob(x), expected, rtol=1e-5)
        np.testing.assert_allclose(model.log_prob(x.reshape(2, 3, D)), expected.reshape(2, 3), rtol=1e-5)


@pytest.mark.parametrize("conditional", [False, True], ids=["unconditional", "conditional"])
def test_sample_weights_weight_the_loss(conditional):
    # The first 10 of 40 rows weigh 1, the rest 0: in batches of 10 (three weighing
    # nothing) as in one, fit's loss (no step: SGD at 0) and evaluate's are the mean of
    # those 10. Keras' adapters drop a sample_weight that comes without y.
    x, y = _data(conditional, n=40)
    model = _model("maf5", conditional)
    model.adapt(x, y)  # the statistics fit would take: the model stays the same throughout
    randomize_weights(model, 0, scale=0.3)
    model.compile(optimizer=keras.optimizers.SGD(0.0), jit_compile=False)
    weights = np.r_[np.ones(10), np.zeros(30)].astype(np.float32)
    data, y10 = ((x, y), y[:10]) if conditional else ((x,), None)

    def weighted_nll(**training):  # the first 10 rows' (batch norms: as in a batch of 10)
        return -np.mean(model.log_prob(x[:10], y10, **training))

    for batch_size in (10, 40):
        np.testing.assert_allclose(model.evaluate(*data, sample_weight=weights, batch_size=batch_size, verbose=0),
                                   weighted_nll(), rtol=1e-5)
        history = model.fit(*data, sample_weight=weights, batch_size=batch_size, epochs=1, verbose=0,
                            shuffle=False, validation_data=(x, y, weights)).history
        np.testing.assert_allclose(history["val_loss"][0], weighted_nll(), rtol=1e-5)
        if batch_size == 10:
            np.testing.assert_allclose(history["loss"][0], weighted_nll(training=True), rtol=1e-5)
        else:  # the batch norms' statistics are those of the 40 rows
            train_mode = model.log_prob(x, y, training=True).numpy()
            np.testing.assert_allclose(history["loss"][0], -np.mean(train_mode[:10]), rtol=1e-5)
    # The on-batch calls weigh alike.
    np.testing.assert_allclose(model.test_on_batch(*data, sample_weight=weights), weighted_nll(), rtol=1e-5)
    if not conditional:
        with pytest.raises(ValueError, match="unconditional: class_weight weighs rows by their class"):
            model.fit(x, sample_weight=weights, class_weight={0: 1.0}, epochs=1, verbose=0)
        with pytest.raises(ValueError, match="unconditional: class_weight weighs rows by their class"):
            model.train_on_batch(x, class_weight={0: 1.0})  # Keras' own: an IndexError


@pytest.mark.parametrize("conditional", [False, True], ids=["unconditional", "conditional"])
@pytest.mark.parametrize("name", CLASSES)
def test_sample_edge_inputs(name, conditional):
    model = _model(name, conditional)
    y = np.eye(K, dtype=np.float32)[0] if conditional else None
    assert model.sample(0, y=y).shape == [0, D]
    assert model.sample(np.int64(2), y=y).shape == [2, D]
    # A NumPy or tensor integer seed is the Python int's; beyond int32 it is refused.
    same = model.sample(3, y=y, seed=5).numpy()
    for seed in (np.int64(5), np.int32(5), tf.constant(5), (0, 5), np.array([0, 5])):
        np.testing.assert_array_equal(model.sample(3, y=y, seed=seed), same)
    for seed in (2**40, (0, -2**33), 2.5, (1, 2, 3)):
        with pytest.raises(ValueError, match=r"sample\(seed=...\) needs an integer or two, each within int32"):
            model.sample(3, y=y, seed=seed)
    for bad in (-1, 2.5, "3"):
        with pytest.raises(ValueError, match="sample\\(n\\) needs an integer n >= 0, got n="):
            model.sample(bad, y=y)
    if conditional:
        with pytest.raises(ValueError, match=r"sample\(n=3\) needs y of shape \[2\] or \[3, 2\]"):
            model.sample(3, y=np.ones((2, K), np.float32))
        assert model.sample(3, y=np.eye(K, dtype=np.float32)[[0, 1, 1]]).shape == [3, D]
        # One row as a batch of one (y[:1]) broadcasts, as in NumPy: the same samples as [K].
        one_row = np.eye(K, dtype=np.float32)[:1]
        np.testing.assert_array_equal(model.sample(3, y=one_row, seed=4), model.sample(3, y=one_row[0], seed=4))
        assert model.sample(np.int64(1), y=one_row).shape == [1, D]


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16", "bfloat16"])
def test_16_bit_policies_are_refused_with_the_reason(policy):
    keras.mixed_precision.set_global_policy(policy)
    try:
        with pytest.raises(ValueError, match=f"dtype policy is .{policy}."):
            km.MAF(D, hidden_units=[8])
    finally:
        keras.mixed_precision.set_global_policy("float32")


def test_a_float64_global_policy_gives_a_float64_model():
    keras.mixed_precision.set_global_policy("float64")
    try:
        model = km.MAF(D, hidden_units=[8], num_layers=2)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    x, _ = _data(False, "float64")
    model.compile(optimizer=FusedAdam(), jit_compile=False)
    model.fit(x, epochs=1, batch_size=20, verbose=0)
    assert {v.dtype for v in model.weights} == {"float64"} and model.sample(2).dtype == tf.float64


@pytest.mark.parametrize("as_tensor", [False, True], ids=["numpy", "tensor"])
def test_a_float64_model_fed_arrays_sees_float64(as_tensor):
    # Keras casts float arrays and tensors to floatx() (float32): the model hands them
    # to Keras as a dataset of its dtype, and changes no process-wide setting.
    model = _model("maf5", conditional=True, dtype="float64")
    x, y = _data(True, "float64")
    x = x * 1e-4 + 1.0  # differences float32 cannot hold
    if as_tensor:
        x, y = tf.constant(x), tf.constant(y)
    model.compile(optimizer=FusedAdam(), jit_compile=False)
    log_p = model.log_prob(x, y)
    np.testing.assert_allclose(model.predict((x, y), batch_size=20, verbose=0), log_p, rtol=1e-13)
    np.testing.assert_allclose(model.evaluate(x, y, batch_size=40, verbose=0), -np.mean(log_p), rtol=1e-13)
    seen = []
    look = keras.callbacks.LambdaCallback(on_train_batch_end=lambda *_, **__: seen.append(keras.config.floatx()))
    history = model.fit(x, y, epochs=1, batch_size=20, verbose=0, validation_data=(x, y), callbacks=[look])
    assert set(seen) == {"float32"} and len(seen) == 2
    np.testing.assert_allclose(history.history["val_loss"][0], -np.mean(model.log_prob(x, y)), rtol=1e-13)
    # Keras' array semantics kept: the split's last rows held out, weights, batches, shuffles.
    weights = np.linspace(0.5, 1.5, len(x))
    for fits, shuffle in enumerate((True, "batch", False), start=1):
        history = model.fit(x, y, sample_weight=weights, validation_split=0.25, batch_size=10, epochs=1,
                            shuffle=shuffle, verbose=0, callbacks=[look])
        assert len(seen) == 2 + 3 * fits  # 30 rows trained on, in batches of 10
        held = slice(30, None)
        expected = -np.average(model.log_prob(x[held], y[held]), weights=weights[held])
        np.testing.assert_allclose(history.history["val_loss"][0], expected, rtol=1e-12)
    assert set(seen) == {"float32"}
    with pytest.raises(ValueError, match=r"expected x with 3 columns, got shape \[40, 2\]"):
        model.fit(x[:, :2], y, verbose=0)
    assert keras.config.floatx() == "float32"


def test_fit_names_a_wrong_width_in_any_input_form_before_tracing():
    model = _model("maf5", conditional=True)
    model.compile(optimizer=FusedAdam(), jit_compile=False)
    x, y = _data(True)
    wide = np.ones((len(x), D + 2), np.float32)
    ds = tf.data.Dataset.from_tensor_slices((x, wide[:, :1])).batch(20)
    for call, shape in [
        (lambda: model.fit(x, wide, verbose=0), r"y with 2 columns, got shape \[40, 5\]"),
        (lambda: model.fit((wide, y), verbose=0), r"x with 3 columns, got shape \[40, 5\]"),
        (lambda: model.fit(ds, verbose=0), r"y with 2 columns, got shape \[None, 1\]"),
        (lambda: model.fit(x, y, verbose=0, validation_data=(wide, y)), r"x with 3 columns, got shape \[40, 5\]"),
        (lambda: model.evaluate(x, wide, verbose=0), r"y with 2 columns, got shape \[40, 5\]"),
        (lambda: model.predict((wide, y), verbose=0), r"x with 3 columns, got shape \[40, 5\]"),
        (lambda: model.fit(x, np.arange(len(x)) % K, verbose=0),
         r"y with 2 columns, got shape \[40\]. Class labels go in one-hot, keras.utils.to_categorical\(labels, 2\)"),
    ]:
        with pytest.raises(ValueError, match=shape):
            call()
    assert np.isfinite(model.fit(x, y, epochs=1, verbose=0).history["loss"][-1])


def test_keras_serialization_round_trip():
    for name in NAMES:
        model = _model(name, conditional=True)
        config = keras.saving.serialize_keras_object(model)
        again = keras.saving.deserialize_keras_object(config)
        assert type(again) is type(model) and again.get_config() == model.get_config(), name


# -- a TFP user's hand-built chains --------------------------------------------------------


def _chain(num_components=None):
    mades = [tfp_maf.MADENetwork(D, [8], conditional_dims=K, seed=i) for i in range(3)]
    for made in mades:
        randomize_weights(made, 1, scale=0.2)
    chain = tfb.Chain([
        tfp_maf.MaskedAutoregressive(mades[0], name="maf_0"),
        tfb.Permute([2, 0, 1]),
        tfb.Chain([tfp_maf.MaskedAutoregressive(mades[1], name="maf_1")]),
        tfb.Invert(tfp_maf.MaskedAutoregressive(mades[2], name="iaf")),
    ])
    return tfd.TransformedDistribution(tfd.MultivariateNormalDiag(loc=np.zeros(D, np.float32)), chain)


@pytest.mark.parametrize("form", ["numpy", "list", "tensor", "one_row"])
def test_hand_built_chains_take_y_in_any_form(form):
    flow = _chain()
    x, y = _data(True, n=5)
    given = {"numpy": y, "list": y.tolist(), "tensor": tf.constant(y), "one_row": y[0]}[form]
    kw = tfp_maf.flow_kwargs(flow.bijector, conditional_input=given)
    log_p = flow.log_prob(x, bijector_kwargs=kw)
    as_tensor = tf.constant(y[:1] if form == "one_row" else y)
    reference = flow.log_prob(x, bijector_kwargs=tfp_maf.flow_kwargs(flow.bijector, as_tensor))
    np.testing.assert_allclose(log_p, reference, rtol=1e-5)
    assert flow.sample(5, bijector_kwargs=kw, seed=1).shape == [5, D]
    s, lp = tfp_maf.bind_kwargs(flow, given).experimental_sample_and_log_prob(5, seed=3)
    np.testing.assert_allclose(lp, flow.log_prob(s, bijector_kwargs=kw), rtol=1e-4, atol=1e-4)


def test_conditional_iaf_samples_with_its_log_prob():
    made = tfp_maf.MADENetwork(D, [8], conditional_dims=K, seed=4)
    randomize_weights(made, 4, scale=0.2)
    base = tfd.MultivariateNormalDiag(loc=np.zeros(D, np.float32))
    iaf = tfd.TransformedDistribution(base, tfb.Invert(tfp_maf.MaskedAutoregressive(made, name="iaf")))
    y = np.eye(K, dtype=np.float32)[[0, 1, 1, 0]]
    s, lp = iaf.experimental_sample_and_log_prob(4, seed=5, bijector_kwargs={"conditional_input": y})
    np.testing.assert_allclose(lp, iaf.log_prob(tf.identity(s), bijector_kwargs={"conditional_input": y}),
                               rtol=1e-4, atol=1e-4)


# -- the command line a person runs ---------------------------------------------------------


def test_cli_help_imports_no_tensorflow_and_is_silent():
    """``tfp-maf train --help`` answers without TensorFlow (what made it take 8 s)."""
    probe = (
        "import sys\nfrom tfp_maf_cli import main\ntry:\n    main(['train', '--help'])\n"
        "except SystemExit:\n    pass\n"
        "assert 'tensorflow' not in sys.modules, 'tensorflow was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: tfp-maf train") and done.stderr == ""


def test_cli_refuses_another_keras_backend(tmp_path):
    """A ``KERAS_BACKEND`` it cannot run on is refused, not ignored, before anything is written."""
    done = subprocess.run([sys.executable, "-m", "tfp_maf_cli", "train", "--out", str(tmp_path / "run")],
                          env={**os.environ, "KERAS_BACKEND": "jax"}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "KERAS_BACKEND is 'jax'" in done.stderr and "tensorflow" in done.stderr, done.stderr
    assert not (tmp_path / "run").exists()


def test_cli_runs_on_tensorflow_whatever_keras_json_says(tmp_path):
    """``keras.json``'s backend is a default for a user's own programs: the command, which has
    no other backend than TensorFlow's, sets its own (JAX is not installed for the tests, so
    Keras would fail to import under it)."""
    (tmp_path / "keras.json").write_text(json.dumps({"backend": "jax", "floatx": "float32", "epsilon": 1e-7,
                                                     "image_data_format": "channels_last"}))
    env = {k: v for k, v in os.environ.items() if k != "KERAS_BACKEND"}
    probe = ("import tfp_maf_cli\ntfp_maf_cli._use_tensorflow_backend()\n"
             "import keras, keras_models\nprint(keras.config.backend())\n")
    done = subprocess.run([sys.executable, "-c", probe], env={**env, "KERAS_HOME": str(tmp_path)},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "tensorflow"


def test_importing_keras_models_is_enough_to_load_a_saved_model(tmp_path):
    """As the README shows: ``import keras_models`` and then Keras' own ``load_model``
    (the models register with Keras on import, not on first use)."""
    _model("maf5", conditional=False).save(tmp_path / "m.keras")
    probe = (f"import keras, keras_models\nm = keras.saving.load_model({str(tmp_path / 'm.keras')!r})\n"
             "print(type(m).__name__)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "MAF"


def test_conditional_models_train_and_evaluate_without_tensorflow_errors_in_the_log():
    """TF's oneDNN rewrite broke a conditional MADE's MatMul + BiasAdd + Add + Relu into a
    node without an op: a dozen error lines on every trace of fit, log_prob and sample."""
    probe = (
        "import numpy as np\nfrom keras_models import MAF, MADEMoG\n"
        "x = np.random.default_rng(0).normal(size=(8, 3)).astype('float32')\n"
        "y = np.eye(2, dtype='float32')[[0, 1] * 4]\n"
        "for cls in (MAF, MADEMoG):\n"
        "    m = cls(3, hidden_units=[8, 8], conditional_dims=2, **({'num_layers': 2} if cls is MAF else {}))\n"
        "    m.compile(optimizer='adam')\n"
        "    m.fit(x, y, epochs=1, batch_size=4, verbose=0)\n"
        "    m.log_prob(x, y), m.sample(2, y[:2])\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines()
              if line.startswith(("E0000", "W0000")) and "cuInit" not in line]
    assert not errors, "\n".join(errors[:4])


@pytest.mark.parametrize("bar", [False, True], ids=["log", "terminal"])
def test_training_progress_shows_epochs_best_and_time_left(bar):
    import io

    from keras_models.progress import TrainingProgress

    model = _model("made", conditional=False)
    model.compile(optimizer=FusedAdam(1e-3), jit_compile=False)
    x, _ = _data(False, n=60)
    stream = io.StringIO()
    progress = TrainingProgress(max_epochs=2, patience=30, stream=stream, bar=bar)
    model.fit(x, batch_size=20, epochs=2, validation_data=(x,), verbose=0, callbacks=[progress])
    lines = stream.getvalue().split("\n")
    assert lines[0].startswith("training made") and "3 steps per epoch" in lines[0]
    assert "epoch 2/2  loss" in lines[2] and "val_loss" in lines[2] and "best" in lines[2]
    assert "elapsed, at most" in lines[2] and lines[3] == ""
    assert ("[########################] 3/3" in stream.getvalue()) == bar  # the bar, on a terminal only


def test_training_progress_shows_the_best_epoch_of_a_resumed_run():
    """A run resumed from its backup shows the best epoch from before the resume,
    which early stopping's restored state holds, not the best since."""
    import io

    from keras_models.progress import TrainingProgress

    model = _model("made", conditional=False)
    model.compile(optimizer=FusedAdam(1e-3), jit_compile=False)
    x, _ = _data(False, n=60)
    stream = io.StringIO()
    progress = TrainingProgress(max_epochs=40, patience=30, stream=stream, bar=False)
    progress.stopper = keras.callbacks.EarlyStopping(patience=30)
    progress.stopper.best, progress.stopper.best_epoch = -1e9, 10  # as RunBackup restores it
    model.fit(x, batch_size=20, epochs=32, initial_epoch=31, validation_data=(x,), verbose=0,
              callbacks=[progress])
    line = stream.getvalue().split("\n")[1]
    assert line.startswith("epoch 32/40") and "best -1000000000.0000 (epoch 11)" in line, line


def test_a_non_finite_validation_loss_is_counted_and_explained():
    """Validation rows far outside the data put the loss at inf: each line says so from
    then on, the run ends with what to do, and fit_as_paper's info counts the epochs."""
    import io

    from keras_models.data.pipeline import array_dataset
    from keras_models.progress import TrainingProgress
    from keras_models.training import fit_as_paper

    # As the paper's protocol builds it: no log tails or log-scale bounds, which keep far
    # rows finite (`tests/test_own_table.py`).
    model = km.MADE(D, hidden_units=[8], standardize=False, tails=None, log_scale_bound=None)
    randomize_weights(model, 0, scale=0.2)
    model.compile(optimizer=FusedAdam(1e-3), jit_compile=False)
    x, _ = _data(False, n=60)
    far = np.full((4, x.shape[1]), 1e30, np.float32)  # finite, but log p underflows to -inf
    stream = io.StringIO()
    progress = TrainingProgress(max_epochs=2, patience=30, stream=stream, bar=False)
    _, info = fit_as_paper(model, array_dataset(x, batch_size=20), array_dataset(far), x, max_epochs=2,
                           verbose=0, callbacks=[progress])
    lines = stream.getvalue().split("\n")
    assert "val_loss inf (not finite in 1 epoch so far)" in lines[1], lines[1]
    assert "(not finite in 2 epochs so far)" in lines[2], lines[2]
    assert lines[3].startswith("the validation loss was not finite in 2 of 2 epochs"), lines[3]
    assert info["non_finite_val_epochs"] == 2


def test_cli_choices_match_the_zoo_and_the_loaders():
    import tfp_maf_cli as cli
    from keras_models.data import LOADERS
    from keras_models.presets import PROTOCOLS

    assert sorted(cli.MODEL_NAMES) == sorted(MODELS)
    assert sorted(cli.DATASET_NAMES) == sorted(LOADERS)
    assert cli.PROTOCOLS == PROTOCOLS


def test_every_cli_option_says_what_it_does_and_its_default():
    import argparse

    import tfp_maf_cli as cli

    parser = cli._parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for command, sub in commands.choices.items():
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            option = f"tfp-maf {command} {'/'.join(action.option_strings)}"
            assert action.help, f"{option} has no help text"
            shows_default = "default" in action.help or action.default in (None, False) or action.required
            assert shows_default, f"{option}: its help does not give its default {action.default!r}"


SEEDED = {"made": {}, "made-mog": {"num_components": 2}, "maf5": {"num_layers": 2},
          "maf-mog5": {"num_layers": 2, "num_components": 2}, "nsf5": {"num_layers": 2},
          "realnvp5": {"num_layers": 2}}
_WEIGHTS_OF = """
import json, sys, numpy as np, keras_models as km
for name, kwargs in json.loads(sys.argv[1]).items():
    model = km.build(name, 3, hidden_units=[8], seed=3, conditional_dims=2, **kwargs)
    np.savez(f"{sys.argv[2]}/{name}.npz", *model.get_weights())
"""


@pytest.fixture(scope="module")
def fresh_process_weights(tmp_path_factory):
    """Every family's weights at seed 3, built one after another in one fresh process."""
    path = tmp_path_factory.mktemp("seeded")
    subprocess.run([sys.executable, "-c", _WEIGHTS_OF, json.dumps(SEEDED), str(path)],
                   check=True, capture_output=True, timeout=300)
    return path


@pytest.mark.parametrize("name", sorted(SEEDED))
def test_the_same_seed_gives_the_same_model_in_any_process(name, fresh_process_weights):
    def weights(seed):
        model = km.build(name, 3, hidden_units=[8], seed=seed, conditional_dims=2, **SEEDED[name])
        return model.get_weights()

    first, again, other = weights(3), weights(3), weights(4)
    for a, b in zip(first, again, strict=True):
        np.testing.assert_array_equal(a, b, err_msg=f"{name}: seed 3 twice")
    assert any(np.any(a != b) for a, b in zip(first, other, strict=True)), f"{name}: seeds 3 and 4 agree"
    # Each random weight its own stream: no two kernels of one shape drawn alike.
    random = [w for w in first if w.ndim == 2 and np.count_nonzero(w) > 1]
    assert len({w.tobytes() for w in random}) == len(random), name
    fresh = np.load(fresh_process_weights / f"{name}.npz")
    for i, a in enumerate(first):
        np.testing.assert_array_equal(a, fresh[f"arr_{i}"], err_msg=f"{name}: seed 3 in a fresh process")
