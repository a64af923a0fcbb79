"""keras_models: every zoo model fits, saves, reloads; evaluation as the paper."""

from __future__ import annotations

import json
import logging
import math
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import zoo_model

import keras_models as km
import tfp_maf
from keras_models import _checks
from keras_models.data import Figure1Density
from keras_models.evaluation import (
    bits_per_pixel,
    marginal_log_likelihoods,
    mean_and_two_se,
    paired_comparison,
)
from keras_models.optimizers import FusedAdam
from tfp_maf.layers import sublayers
from tfp_maf.testing import randomize_weights

FLOWS = ["made", "made-mog", "realnvp5", "maf5", "maf-mog5", "nsf5"]


def _data(conditional, n=400, seed=0):
    x = Figure1Density().sample(n, seed).astype(np.float32)
    if not conditional:
        return x, None
    labels = (x[:, 1] > 0).astype(int)
    return x, np.eye(2, dtype=np.float32)[labels]


def _ds(x, y, batch=100):
    return tf.data.Dataset.from_tensor_slices(x if y is None else (x, y)).batch(batch)


def _small(name, conditional):
    kw = dict(hidden_units=[16], num_layers=2, num_components=3)
    return zoo_model(name, 2, conditional_dims=2 if conditional else None, **kw)


@pytest.mark.parametrize("conditional", [False, True], ids=["unconditional", "conditional"])
@pytest.mark.parametrize("name", FLOWS)
def test_fit_lowers_the_loss_and_trains_every_weight(name, conditional):
    x, y = _data(conditional)
    model = _small(name, conditional)
    model.compile(optimizer=FusedAdam(1e-2))
    before = [v.numpy().copy() for v in model.trainable_variables]
    history = model.fit(_ds(x, y), epochs=4, verbose=0)
    losses = history.history["loss"]
    assert losses[-1] < losses[0], losses
    for v, b in zip(model.trainable_variables, before, strict=True):
        assert not np.array_equal(v.numpy(), b), f"{name}: {v.path} did not train"
    # The reported loss is the mean NLL of the model, not a constant.
    assert abs(model.evaluate(_ds(x, y), verbose=0) + np.mean(model.log_prob(x, y))) < 1e-3


def test_fit_on_a_dataset_says_nothing_about_shuffle():
    """Keras' default shuffle=True warns on every fit over a Dataset, which shuffles
    itself; an explicit shuffle is the caller's and passes through."""
    x, _ = _data(False, n=200)
    model = _small("made", False)
    model.compile(optimizer=FusedAdam(1e-3))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(_ds(x, None), epochs=1, verbose=0)
        model.fit(x, epochs=1, batch_size=100, verbose=0)  # arrays: Keras shuffles them, as ever
    assert not [w for w in caught if "shuffle" in str(w.message)]
    # Whether Keras warns about an explicit shuffle over a Dataset depends on its release
    # (3.15 does, 3.10 does not), so what is checked is that ours reaches Keras as given.
    ds = _ds(x, None)
    assert _checks.dataset_shuffle(keras.Model.fit, (model, ds), {"shuffle": True}) == {"shuffle": True}
    assert _checks.dataset_shuffle(keras.Model.fit, (model, ds), {}) == {"shuffle": False}
    assert _checks.dataset_shuffle(keras.Model.fit, (model, x), {}) == {}


def test_training_many_models_says_nothing_about_retracing():
    """Keras makes fit's, evaluate's and predict's functions anew per model from the same
    code; TF counted them as one function's retraces and warned from the fifth model."""
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    tf.get_logger().addHandler(handler)
    try:
        x, _ = _data(False, n=100)
        for _ in range(6):
            model = km.MADE(2, hidden_units=[4])
            model.compile(optimizer=FusedAdam(1e-3))
            model.fit(_ds(x, None, batch=50), epochs=1, verbose=0)
            model.evaluate(_ds(x, None, batch=50), verbose=0)
            model.predict(_ds(x, None, batch=50), verbose=0)
    finally:
        tf.get_logger().removeHandler(handler)
    assert not [r for r in records if "retracing" in r.getMessage()]


def test_every_weight_is_tracked():
    model = km.MAF(3, hidden_units=[8], num_layers=2)
    names = sorted(v.path for v in model.weights)
    assert len(model.trainable_variables) == 2 * 4 + 2 * 2  # 2 MADEs (2 kernels, 2 biases) + 2 BN (beta, gamma)
    assert sum("batch_norm" in n and ("mean" in n or "variance" in n) for n in names) == 4


def test_maf_orders_alternate_and_batch_norm_sits_between_layers():
    model = km.MAF(3, hidden_units=[8], num_layers=3)
    assert [m.order for m in model.mades] == ["left-to-right", "right-to-left", "left-to-right"]
    names = [b.name for b in model.distribution().bijector.bijectors]
    assert names == ["standardize", "log_tails", "maf_0", "batch_norm_0", "maf_1", "batch_norm_1", "maf_2",
                     "batch_norm_2"]


def test_gaussian_equals_the_closed_form_fit():
    x, y = _data(True, n=2000)
    model = km.Gaussian(2).fit_closed_form(x)
    mean, cov = x.mean(0), np.cov(x, rowvar=False, bias=True)
    diff = x - mean
    ref = -0.5 * (np.einsum("nd,de,ne->n", diff, np.linalg.inv(cov), diff) + np.log(np.linalg.det(2 * np.pi * cov)))
    np.testing.assert_allclose(model.log_prob(x), ref, rtol=1e-4)
    cond = km.Gaussian(2, conditional_dims=2).fit_closed_form(x, y)
    k1 = y[:, 1] == 1
    m1 = x[k1].mean(0)
    np.testing.assert_allclose(cond.loc.numpy()[1], m1, rtol=1e-5)
    # Keras' fit would train nothing (no trainable weights) and said nothing: refused.
    model.compile(optimizer=FusedAdam(1e-3))
    with pytest.raises(TypeError, match=r"fitted in closed form.*call fit_closed_form\(x, y\)"):
        model.fit(x, epochs=1, verbose=0)


def test_conditional_evaluation_equals_hand_computed_logsumexp():
    x, y = _data(True, n=50)
    model = km.Gaussian(2, conditional_dims=2).fit_closed_form(*_data(True, n=2000))
    p0 = model.log_prob(x, np.tile([[1.0, 0.0]], (50, 1))).numpy()
    p1 = model.log_prob(x, np.tile([[0.0, 1.0]], (50, 1))).numpy()
    np.testing.assert_allclose(
        marginal_log_likelihoods(model, x, 2), np.logaddexp(p0, p1) - math.log(2), rtol=1e-6
    )


def test_mean_and_paired_comparison():
    m, se = mean_and_two_se([1.0, 2.0, 3.0])
    assert m == 2.0 and abs(se - 2 * 1.0 / math.sqrt(3)) < 1e-12
    assert paired_comparison([2.0, 3.0], [1.0, 2.0]) == (1.0, 0.0)
    with pytest.raises(ValueError, match="not finite"):
        mean_and_two_se([1.0, np.nan])
    with pytest.raises(ValueError, match="same test points"):
        paired_comparison([1.0], [1.0, 2.0])


def test_bits_per_pixel_matches_a_direct_change_of_variables():
    lam, D = 1e-6, 4
    rng = np.random.RandomState(0)
    z = rng.uniform(0, 256, size=(3, D))  # image space [0, 256)
    p = lam + (1 - 2 * lam) * z / 256
    x = np.log(p) - np.log1p(-p)
    log_px = rng.normal(size=3)
    # log p_z = log p_x + sum log |dx/dz|, dx/dz = (1 - 2 lam) / 256 / (p (1 - p))
    log_pz = log_px + np.sum(np.log((1 - 2 * lam) / 256) - np.log(p * (1 - p)), -1)
    np.testing.assert_allclose(bits_per_pixel(log_px, x, lam), -log_pz / (D * math.log(2)), rtol=1e-9)


@pytest.mark.parametrize("name", ["gaussian"] + FLOWS)
def test_keras_save_and_load_is_exact(name, tmp_path):
    x, y = _data(True)
    model = _small(name, True)
    if name == "gaussian":
        model.fit_closed_form(x, y)
    else:
        model.compile(optimizer=FusedAdam(1e-2))
        model.fit(_ds(x, y), epochs=1, verbose=0)
        model.set_batch_norm_statistics(x, y)
    path = tmp_path / "m.keras"
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    np.testing.assert_array_equal(loaded.log_prob(x, y), model.log_prob(x, y))
    assert type(loaded) is type(model)


@pytest.mark.parametrize("compiled", [dict(loss="mse"), dict(metrics=["mae"]), dict(loss_weights=[1.0]),
                                      dict(weighted_metrics=["mae"])], ids=lambda d: next(iter(d)))
def test_a_loss_or_metrics_compiled_in_are_refused_where_they_would_be_ignored(compiled):
    # Keras takes them; the steps compute the negative log-likelihood alone.
    x, _ = _data(False, n=100)
    model = _small("maf5", False)
    model.compile(optimizer=FusedAdam(), **compiled)
    for call in (lambda: model.fit(x, batch_size=50, verbose=0), lambda: model.evaluate(x, verbose=0),
                 lambda: model.train_on_batch(x), lambda: model.test_on_batch(x)):
        with pytest.raises(ValueError, match=f"compiled with {next(iter(compiled))}=.*optimizer alone"):
            call()
    model.compile(optimizer=FusedAdam())
    model.fit(x, batch_size=50, verbose=0)
    model.predict(x, verbose=0)


@pytest.mark.parametrize("suffix", [".h5", ".HDF5"])
def test_the_legacy_hdf5_format_is_refused_before_a_file_is_touched(suffix, tmp_path):
    # Keras' HDF5 writer names weights per layer by their short names: a MADE's kernels
    # collide and h5py stops half-way, after emptying the file. The refusal comes first,
    # from model.save and from a ModelCheckpoint alike, and names the formats that work.
    x, _ = _data(False)
    model = _small("maf5", False)
    model.compile(optimizer=FusedAdam(1e-2))
    model.fit(x, batch_size=50, epochs=1, verbose=0)
    path = tmp_path / f"m{suffix}"
    path.write_bytes(b"an earlier save")
    with pytest.raises(ValueError, match=r"expected a path ending in \.keras.*model\.save_weights"):
        model.save(path)
    assert path.read_bytes() == b"an earlier save"
    with pytest.raises(ValueError, match="legacy HDF5"):
        model.fit(x, batch_size=50, epochs=1, verbose=0,
                  callbacks=[keras.callbacks.ModelCheckpoint(str(tmp_path / "best.h5"))])
    model.save(tmp_path / "m.keras")  # the format that holds it


def test_batch_norm_statistics_come_from_the_training_set():
    x, _ = _data(False, n=500)
    model = km.MAF(2, hidden_units=[8], num_layers=2)
    model.set_batch_norm_statistics(x)
    first = model.norms[0]
    # The first batch norm sees the data mapped through the first MADE (identity at init).
    np.testing.assert_allclose(first.mean.numpy(), x.mean(0), rtol=1e-5)
    np.testing.assert_allclose(first.variance.numpy(), x.var(0), rtol=1e-4)
    # ...and then evaluation mode on the training set equals training mode on it.
    np.testing.assert_allclose(model.log_prob(x, training=True), model.log_prob(x), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("x_shape, y_shape", [((20, 2), None), ((20, 2), (20, 2)), ((20, 2), (2,)),
                                              ((4, 5, 2), (5, 2)), ((2,), (4, 5, 2)), ((6, 2), None)])
def test_a_large_eager_log_prob_goes_through_the_traced_function_in_parts(monkeypatch, x_shape, y_shape):
    # 7 rows a call: 20 rows go in three parts of 7, 7 and 6; 6 rows in one call, as given.
    monkeypatch.setattr(km.model_functions, "CALL_VALUES", 14)
    model = _small("maf5", y_shape is not None)
    randomize_weights(model, 0, scale=0.3)
    rng = np.random.default_rng(0)
    x = rng.normal(size=x_shape).astype(np.float32)
    y = None if y_shape is None else rng.normal(size=y_shape).astype(np.float32)
    traced, calls = model._traced_log_prob, []

    def spy(x, y):
        calls.append((x.shape, y is None or y.shape))
        return traced(x, y)

    monkeypatch.setattr(model, "_traced_log_prob", spy)
    log_prob = model.log_prob(x, y)
    expected = model.distribution(y).log_prob(x)  # the TFP distribution, in one eager call
    assert log_prob.shape == expected.shape
    np.testing.assert_allclose(log_prob, expected, rtol=1e-5, atol=1e-5)
    if x_shape == (6, 2):
        assert calls == [((6, 2), True)]
    else:
        assert [shape[0] for shape, _ in calls] == [7, 7, 6], calls
        assert all(y_seen is True or y_seen == (shape[0], 2) for shape, y_seen in calls), calls


@pytest.mark.parametrize("name", ["maf5", "maf-mog5", "realnvp5"])
@pytest.mark.parametrize("y_rows", [None, 1, 20], ids=["unconditional", "one y", "y per row"])
def test_a_large_eager_sample_from_noise_goes_in_parts(monkeypatch, name, y_rows):
    monkeypatch.setattr(km.model_functions, "CALL_VALUES", 14)  # 7 rows a call
    monkeypatch.setattr(km.model_functions, "SAMPLE_FACTOR", 1)
    by_parts, mapped = km.model_functions.by_parts, []
    monkeypatch.setattr(km.model_functions, "by_parts",
                        lambda call, n, rows: mapped.append((n, rows)) or by_parts(call, n, rows))
    model = _small(name, y_rows is not None)
    randomize_weights(model, 0, scale=0.3)
    rng = np.random.default_rng(0)
    y = None if y_rows is None else rng.normal(size=(y_rows, 2)).astype(np.float32)
    noise = rng.standard_normal((20, 2)).astype(np.float32)
    gumbel = None if model.mixture_components is None else rng.gumbel(size=(20, 2, 3)).astype(np.float32)
    in_parts = model.sample_from_noise(noise, y, gumbel)
    assert mapped == [(20, 7)]
    monkeypatch.setattr(km.model_functions, "CALL_VALUES", 2**21)
    # (rtol 1e-5: a random MAF MoG's rows reach 3e9, where the log tails' exp magnifies
    # the float32 rounding of a product computed in a part or in the whole.)
    np.testing.assert_allclose(in_parts, model.sample_from_noise(noise, y, gumbel), rtol=1e-5, atol=1e-6)
    # sample: one call whatever n, so a seed draws what the export's sample draws.
    model.sample(20, y, seed=3)
    assert mapped == [(20, 7)]


@pytest.mark.parametrize("conditional", [False, True], ids=["unconditional", "conditional"])
def test_a_dataset_never_batched_is_refused_by_fit(conditional):
    # from_tensor_slices(x) without .batch(): Keras took each row as a batch, and a MAF's
    # loss went to -38 nats while evaluate gave 7.7e8. Scoring it row by row is right.
    x, y = _data(conditional, n=60)
    rows = tf.data.Dataset.from_tensor_slices((x, y) if conditional else x)
    for name, expected in (("maf5", "normalise by its own variance"), ("made", r"one step each\. Batch it")):
        model = _small(name, conditional)
        model.compile(optimizer=FusedAdam(1e-3))
        with pytest.raises(ValueError, match=r"elements are single rows \(x of shape \[2\]\).*" + expected):
            model.fit(rows, epochs=1, verbose=0)
        log_prob = model.log_prob(x, y).numpy()
        np.testing.assert_allclose(model.predict(rows, verbose=0), log_prob, rtol=1e-5, atol=1e-5)
        model.fit(rows.batch(20), epochs=1, verbose=0)


def test_a_batch_of_one_row_is_refused_where_batch_norms_would_normalise_it():
    # In training a batch norm divides by its batch's own spread, which one row has not:
    # the row's loss was off by about 30 nats a layer. Arrays leaving such a batch are
    # refused (naming a batch size that does not); our pipelines leave the row out.
    x = np.random.default_rng(0).normal(size=(201, 2)).astype(np.float32)
    model = km.MAF(2, hidden_units=[8], num_layers=1)
    model.compile(optimizer=FusedAdam(1e-3))
    for kwargs in ({"batch_size": 100}, {"batch_size": 1}, {"batch_size": 99, "validation_split": 0.5}):
        rows = 100 if "validation_split" in kwargs else 201
        with pytest.raises(ValueError, match=f"{rows} training rows in batches of {kwargs['batch_size']} leave a "
                                             r"batch of one row.*e\.g\. \d+\), or drop a row"):
            model.fit(x, epochs=1, verbose=0, **kwargs)
    assert np.isfinite(model.fit(x, batch_size=99, epochs=1, verbose=0).history["loss"][0])
    made = km.MADE(2, hidden_units=[8])  # no batch norm: any batch size
    made.compile(optimizer=FusedAdam(1e-3))
    assert np.isfinite(made.fit(x, batch_size=100, epochs=1, verbose=0).history["loss"][0])
    splits = km.data.Splits("toy", x, x[:20], x[:20])
    pipes = splits.pipelines(batch_size=100)
    assert [int(b.shape[0]) for b in pipes.train] == [100, 100]  # the row left out, a new one each epoch
    assert [int(b.shape[0]) for b in splits.pipelines(batch_size=50).train] == [50, 50, 50, 50]


def test_bad_input_raises_with_what_was_expected():
    model = km.MAF(2, hidden_units=[8], num_layers=1, conditional_dims=3)
    with pytest.raises(ValueError, match=r"expected x with 2 columns, got shape \[4, 5\]"):
        model.log_prob(np.zeros((4, 5), np.float32), np.zeros((4, 3), np.float32))
    with pytest.raises(ValueError, match=r"expected y with 3 columns"):
        model.log_prob(np.zeros((4, 2), np.float32), np.zeros((4, 2), np.float32))
    with pytest.raises(ValueError, match=r"conditional on y with 3 columns: call log_prob\(x, y\)"):
        model.log_prob(np.zeros((4, 2), np.float32))
    with pytest.raises(TypeError, match="floating-point x, got int32"):
        model.log_prob(np.zeros((4, 2), np.int32), np.zeros((4, 3), np.float32))
    with pytest.raises(ValueError, match=r"batch shapes broadcast .*got x of shape \[3, 2\] and y of shape \[4, 3\]"):
        model.log_prob(np.zeros((3, 2), np.float32), np.zeros((4, 3), np.float32))
    with pytest.raises(ValueError, match="unknown model 'maf7'"):
        km.build("maf7", 2)
    with pytest.raises(ValueError, match=r"call log_prob\(x, y\); fit, evaluate and predict take \(x, y\)"):
        model.predict(np.zeros((4, 2), np.float32), verbose=0)
    with pytest.raises(ValueError, match=r"conditional on y with 3 columns: call set_batch_norm_statistics\(x, y\)"):
        model.set_batch_norm_statistics(np.zeros((4, 2), np.float32))
    with pytest.raises(ValueError, match=r"fit needs at least one training row, got x of shape \[0, 2\]"):
        model.fit(np.zeros((0, 2), np.float32), np.zeros((0, 3), np.float32), verbose=0)
    empty = model.predict((np.zeros((0, 2), np.float32), np.zeros((0, 3), np.float32)), verbose=0)
    assert empty.shape == (0,) and empty.dtype == np.float32  # Keras' own predict fails on no rows


def test_cli_trains_evaluates_and_samples(tmp_path, capsys):
    from tfp_maf_cli import main

    out = tmp_path / "run"
    assert main(["train", "--model", "maf5", "--hidden-units", "16", "--max-epochs", "2", "--out", str(out)]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["epochs"] == 2 and math.isfinite(metrics["test_log_likelihood"])
    assert metrics["expected_log_likelihood"] == pytest.approx(-3.531, abs=1e-3)
    progress = capsys.readouterr().err  # not a terminal: one line per epoch, no bar
    assert "epoch 1/2  loss" in progress and "epoch 2/2  loss" in progress and "[#" not in progress
    assert main(["evaluate", "--out", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["test_log_likelihood"] == pytest.approx(metrics["test_log_likelihood"], abs=1e-6)
    assert main(["sample", "--out", str(out), "-n", "3"]) == 0
    assert np.asarray(json.loads(capsys.readouterr().out)["samples"]).shape == (3, 2)
    with pytest.raises(SystemExit, match="this model is unconditional; --label is for a conditional one"):
        main(["sample", "--out", str(out), "-n", "3", "--label", "1"])
    assert main(["export", "--out", str(out)]) == 0
    assert (out / "saved_model" / "saved_model.pb").exists()


def test_reproduce_writes_results_beside_the_paper_and_figures(tmp_path):
    import tfp_maf_cli as cli
    from keras_models import experiment

    common = ["reproduce", "--results", str(tmp_path), "--runs", str(tmp_path / "runs"), "--quiet"]
    cli.main([*common, "--models", "gaussian", "made", "--max-epochs", "2"])
    result = json.loads((tmp_path / "figure1.json").read_text())
    assert [row["model"] for row in result["rows"]] == ["gaussian", "made"]
    made = result["rows"][1]
    assert made["epochs"] == 2 and not made["early_stopped"]
    assert made["paper"] == {"log_likelihood": -3.531, "error_bar": 0.0}
    table = (tmp_path / "figure1.md").read_text()
    assert "**no (cap: 2 epochs)**" in table and "-3.531 (exact)" in table
    assert (tmp_path / "figures" / "figure1.png").stat().st_size > 10_000
    assert json.loads((tmp_path / "figures" / "figure1_made.json").read_text())["u_space"]["gaussian_kl"] > 0
    assert experiment.paper_value("miniboone", "maf-mog5") == (-11.68, 0.44)
    assert experiment.paper_value("cifar10", "maf10", conditional=True) == (3058.0, 26.0)
    assert experiment.paper_value("power", "maf5", conditional=True) is None

    # The same command again trains nothing: the finished run is loaded, the row unchanged.
    cli.main([*common, "--models", "made", "--max-epochs", "2", "--no-figures"])
    again = json.loads((tmp_path / "figure1.json").read_text())
    assert again["rows"][1]["test_log_likelihood"] == made["test_log_likelihood"]
    # A larger cap goes on from the kept backup; the other rows stay as they were.
    cli.main([*common, "--models", "made", "--max-epochs", "3", "--no-figures"])
    longer = json.loads((tmp_path / "figure1.json").read_text())
    assert [row["model"] for row in longer["rows"]] == ["gaussian", "made"]
    assert longer["rows"][0] == result["rows"][0]
    assert longer["rows"][1]["epochs"] == 3 and longer["rows"][1]["resumed_from_epoch"] == 2
    assert longer["rows"][1]["wall_time_s"] >= made["wall_time_s"]
    assert longer["rows"][1]["learning_rate"] == pytest.approx(1e-3)  # the paper's, for MADE
    # A smaller cap loads that run: its row and table keep the cap it ran under.
    cli.main([*common, "--models", "made", "--max-epochs", "2", "--no-figures"])
    assert json.loads((tmp_path / "figure1.json").read_text())["rows"][1] == longer["rows"][1]
    assert "**no (cap: 3 epochs)**" in (tmp_path / "figure1.md").read_text()

    # Another step size is a row of its own, beside the paper's, in a run directory of its own.
    cli.main([*common, "--models", "made", "--max-epochs", "2", "--no-figures", "--learning-rate", "1e-4"])
    both = json.loads((tmp_path / "figure1.json").read_text())
    assert [(r["model"], r["paper_step_size"]) for r in both["rows"][1:]] == [("made", True), ("made", False)]
    assert both["rows"][1] == longer["rows"][1]
    assert both["rows"][2]["learning_rate"] == pytest.approx(1e-4) and both["rows"][2]["epochs"] == 2
    assert (tmp_path / "runs" / "made-option0-seed0-step0.0001" / "done.json").exists()
    assert "made (step size 0.0001, not the paper's)" in (tmp_path / "figure1.md").read_text()
    # The paper's own step size, given, is the paper's protocol: the kept run, no new row.
    cli.main([*common, "--models", "made", "--max-epochs", "3", "--no-figures", "--learning-rate", "1e-3"])
    assert json.loads((tmp_path / "figure1.json").read_text()) == both


def test_saved_kernels_with_entries_outside_the_masks_load_as_the_masked_network(tmp_path):
    # Files saved before MADE kernels held zeros outside their masks have
    # arbitrary values there; every way of loading them projects them away.
    x, y = _data(True, n=50)
    model = _small("maf5", True)
    randomize_weights(model, 2)
    model.set_batch_norm_statistics(x, y)
    expected = model.log_prob(x, y).numpy()
    masked = [layer for layer in sublayers(model) if isinstance(layer, tfp_maf.MaskedDense)]
    for layer in masked:
        layer.kernel.assign(layer.kernel + 3.0 * (1 - layer.mask))
    assert all(np.any(layer.kernel.numpy() * (1 - layer.mask) != 0) for layer in masked)
    # A call multiplies by the mask (for its gradient), so even such kernels give the masked network.
    np.testing.assert_allclose(model.log_prob(x, y), expected, rtol=1e-5, atol=1e-5)
    model.save(tmp_path / "m.keras")
    model.save_weights(tmp_path / "m.weights.h5")
    loaded = keras.saving.load_model(tmp_path / "m.keras", safe_mode=True)
    np.testing.assert_allclose(loaded.log_prob(x, y), expected, rtol=1e-5, atol=1e-5)
    fresh = _small("maf5", True)
    fresh.load_weights(tmp_path / "m.weights.h5")
    np.testing.assert_allclose(fresh.log_prob(x, y), expected, rtol=1e-5, atol=1e-5)
    other = _small("maf5", True)
    other.set_weights(model.get_weights())
    np.testing.assert_allclose(other.log_prob(x, y), expected, rtol=1e-5, atol=1e-5)
