"""A user's own table: raw units, far rows, bad rows and columns, from Keras and from the
command line (`keras_models.training_data`, `tfp_maf.Standardization`, `tfp_maf.LogTails`,
the log-scale bounds, `keras_models.keras_loop.NonFiniteGuard`, ``tfp-maf train --data``)."""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import re
import sys
import types
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_models as km
from keras_models.keras_loop import NonFiniteLossWarning
from keras_models.optimizers import FusedAdam
from keras_models.training_data import IntegerColumnsWarning

FAMILIES = {
    "maf": lambda **kw: km.MAF(2, num_layers=2, hidden_units=[32, 32], **kw),
    "maf_mog": lambda **kw: km.MAFMoG(2, num_layers=2, num_components=3, hidden_units=[32, 32], **kw),
    "made": lambda **kw: km.MADE(2, hidden_units=[32, 32], **kw),
    "made_mog": lambda **kw: km.MADEMoG(2, num_components=3, hidden_units=[32, 32], **kw),
    "realnvp": lambda **kw: km.RealNVP(2, num_layers=2, hidden_units=[32], **kw),
    "nsf": lambda **kw: km.NSF(2, num_layers=2, hidden_units=[32], **kw),
}
#: Columns scaled by 1e-3 and 1e6 and shifted up to 1e6 (float32 holds 1e6 + 1e6 z, not
#: 1e6 + 1e-3 z, so the small column is shifted less).
SCALE, SHIFT = np.array([1e-3, 1e6], np.float32), np.array([5.0, 1e6], np.float32)


def _banana(n, seed):
    rng = np.random.default_rng(seed)
    x1 = rng.normal(size=n)
    x2 = x1**2 / 2 + 0.5 * rng.normal(size=n)
    y = (x1 + 0.3 * rng.normal(size=n))[:, None]
    return np.stack([x1, x2], 1).astype(np.float32), y.astype(np.float32)


X, Y = _banana(2000, 0)
X_TEST, Y_TEST = _banana(500, 1)


def _fit(family, x, y, form, conditional, epochs=3):
    keras.utils.set_random_seed(0)
    model = FAMILIES[family](conditional_dims=1 if conditional else None)
    model.compile(optimizer=FusedAdam(1e-3))
    if form == "array":
        model.fit(x, y if conditional else None, batch_size=100, epochs=epochs, verbose=0)
    else:
        ds = tf.data.Dataset.from_tensor_slices((x, y) if conditional else x).batch(100)
        model.fit(ds, epochs=epochs, verbose=0)
    return model


@functools.cache
def _plain_fit(family, conditional):
    """The reference: the unscaled table, fitted from arrays. The raw-units fit of either
    input form is measured against it (one per family a process: a fit is mostly its
    trace)."""
    return _fit(family, X, Y, "array", conditional)


@pytest.mark.parametrize("form", ["array", "dataset"])
@pytest.mark.parametrize("conditional", [False, True], ids=["p(x)", "p(x|y)"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_raw_units_fit_as_the_unscaled_data(family, conditional, form):
    """The same flow on the table in raw units and unscaled: within 0.1 nats a row after
    the Jacobian, since each learns on the same standardised columns; and rows far from
    the data score finite, lower the farther they are."""
    plain = _plain_fit(family, conditional)
    raw = _fit(family, X * SCALE + SHIFT, Y * 1e4 + 5e5, form, conditional)
    yt = Y_TEST if conditional else None
    ll_plain = float(np.mean(plain.log_prob(X_TEST, yt)))
    ll_raw = float(np.mean(raw.log_prob(X_TEST * SCALE + SHIFT, None if yt is None else yt * 1e4 + 5e5)))
    assert np.isfinite(ll_plain) and abs(ll_raw + np.log(SCALE).sum() - ll_plain) < 0.1
    far = np.array([[0.0, 10.0], [1e2, 1e2], [1e4, 1e4], [1e6, 1e6], [1e8, 1e8]], np.float32)  # std ~1-2
    scores = plain.log_prob(far, None if yt is None else np.zeros((5, 1), np.float32)).numpy()
    assert np.all(np.isfinite(scores)) and scores[-1] < scores[1] < scores[0], scores
    if "mog" not in family:  # a mixture's components may follow a ray part of the way
        assert np.all(np.diff(scores[1:]) < 0), scores


def test_statistics_are_taken_once_saved_and_exported(tmp_path):
    x = X * SCALE + SHIFT
    model = km.MAF(2, num_layers=1, hidden_units=[8])
    assert not model.standardization.adapted
    model.compile(optimizer=FusedAdam(1e-3))
    model.fit(x, batch_size=100, epochs=1, verbose=0)
    np.testing.assert_allclose(model.standardization.x_loc.numpy(), x.astype(np.float64).mean(0), rtol=1e-6)
    loc = model.standardization.x_loc.numpy()
    model.fit(x[:500] + 7.0, batch_size=100, epochs=1, verbose=0)  # a second fit keeps them
    np.testing.assert_array_equal(model.standardization.x_loc.numpy(), loc)
    path = str(tmp_path / "m.keras")
    model.save(path)
    restored = keras.saving.load_model(path)
    assert restored.standardization.adapted
    np.testing.assert_allclose(restored.log_prob(x[:5]), model.log_prob(x[:5]), rtol=1e-6)
    model.export(str(tmp_path / "served"))
    served = tf.saved_model.load(str(tmp_path / "served"))
    np.testing.assert_allclose(served.log_prob(tf.constant(x[:5])), model.log_prob(x[:5]), rtol=1e-5)
    samples = model.sample(2000, seed=0).numpy()
    np.testing.assert_allclose(samples.mean(0), x.mean(0), rtol=0.05, atol=0.5 * x.std(0).max())


def test_old_configs_load_without_standardisation_or_tails():
    config = km.MAF(2, num_layers=1, hidden_units=[8]).get_config()
    for key in ("standardize", "tails", "dequantize"):
        del config[key]
    old = km.MAF.from_config(config)
    assert old.standardization is None and old.tails is None
    assert km.MADEMoG.from_config({**_without(km.MADEMoG(2, hidden_units=[8]).get_config()),
                                   "log_scale_bound": 3.0}).log_scale_bound is None


def _without(config):
    return {k: v for k, v in config.items() if k not in ("standardize", "tails", "dequantize")}


def test_the_papers_protocol_is_unchanged():
    from keras_models import experiment
    from keras_models.data import Splits

    x = np.random.default_rng(0).normal(size=(300, 2)).astype(np.float32)
    model, _ = experiment.train(Splits("figure1", x, x[:50], x[:50]), "maf5", max_epochs=1, hidden_units=[8])
    assert model.standardization is None and model.log_scale_bound is None and model.tails is None


@pytest.mark.parametrize("form", ["array", "dataset"])
def test_bad_training_data_is_refused_by_name(form):
    model = km.MAF(3, num_layers=1, hidden_units=[8])
    model.compile(optimizer=FusedAdam(1e-3))
    rng = np.random.default_rng(0)

    def fit(x):
        data = x if form == "array" else tf.data.Dataset.from_tensor_slices(x).batch(100)
        model.fit(data, epochs=1, verbose=0, **({"batch_size": 100} if form == "array" else {}))

    x = rng.normal(size=(5000, 3)).astype(np.float32)
    bad = x.copy()
    bad[[17, 4001], 1] = [np.nan, np.inf]
    with pytest.raises(ValueError, match=r"2 non-finite rows .* of 5000: rows 17, 4001"):
        fit(bad)
    constant = x.copy()
    constant[:, 2] = 5.0
    with pytest.raises(ValueError, match=r"a constant column: column 2 \(every row 5\)"):
        fit(constant)
    repeated = x.copy()
    repeated[:, 2] = repeated[:, 0]
    with pytest.raises(ValueError, match="column 2 repeats column 0"):
        fit(repeated)
    assert not model.standardization.adapted  # nothing was taken from refused data
    counts = x.copy()
    counts[:, 1] = rng.integers(0, 5, 5000)
    with pytest.warns(IntegerColumnsWarning, match=r"column 1\b.*dequantize=\[1\]"):
        fit(counts)


def test_dequantized_columns_get_noise_in_training_only():
    x = np.random.default_rng(0).normal(size=(400, 2)).astype(np.float32)
    x[:, 1] = np.round(x[:, 1] * 3)
    model = km.MAF(2, num_layers=1, hidden_units=[8], dequantize=[1])
    model.compile(optimizer=FusedAdam(1e-3))
    with warnings.catch_warnings():
        warnings.simplefilter("error", IntegerColumnsWarning)  # the dequantized column is not warned of
        model.fit(x, batch_size=100, epochs=1, verbose=0)
    assert model.get_config()["dequantize"] == [1]
    np.testing.assert_array_equal(model.log_prob(x[:4]), model.log_prob(x[:4]))
    with pytest.raises(ValueError, match="dequantize must list columns"):
        km.MAF(2, dequantize=[2])


def test_a_non_finite_step_stops_fit_on_finite_weights(tmp_path):
    x = np.random.default_rng(0).normal(size=(1000, 2)).astype(np.float32)
    model = km.MAF(2, num_layers=1, hidden_units=[8])
    model.compile(optimizer=FusedAdam(1e-3))
    model.fit(x, batch_size=100, epochs=1, verbose=0)  # statistics set: later datasets are not read ahead
    twin = km.MAF(2, num_layers=1, hidden_units=[8])
    twin(x[:2])
    twin.set_weights(model.get_weights())
    poisoned = x.copy()
    poisoned[650] = np.nan  # in the 7th batch of 100
    batches = tf.data.Dataset.from_tensor_slices(poisoned).batch(100)
    checkpoint = str(tmp_path / "best.keras")
    seen = []
    keep = keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: seen.append(model.get_weights()))
    # Plain SGD moves no weight on a zero gradient: fit ends on the 6th step's weights, exactly.
    model.compile(optimizer=keras.optimizers.SGD(1e-2))
    with pytest.warns(NonFiniteLossWarning, match="epoch 1, step 7 "):
        history = model.fit(batches, epochs=4, verbose=0,
                            callbacks=[keras.callbacks.ModelCheckpoint(checkpoint), keep])
    assert len(history.history["loss"]) == 1 and len(seen) == 7
    for weights in (model.get_weights(), keras.saving.load_model(checkpoint).get_weights()):
        for got, want in zip(weights, seen[5], strict=True):
            np.testing.assert_array_equal(got, want)
    assert np.all(np.isfinite(model.log_prob(x[:10])))
    # Steps run in one execution after the non-finite one update from zero gradients too.
    twin.compile(optimizer=keras.optimizers.SGD(1e-2), steps_per_execution=5)
    with pytest.warns(NonFiniteLossWarning):
        twin.fit(batches, epochs=1, verbose=0)
    for got, want in zip(twin.get_weights(), seen[5], strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    # Adam's momentum moves the weights as after a zero gradient: they stay finite.
    twin.compile(optimizer=FusedAdam(1e-3))
    with pytest.warns(NonFiniteLossWarning):
        twin.fit(batches, epochs=1, verbose=0)
    assert all(np.all(np.isfinite(w)) for w in twin.get_weights())


def _cli(*args, cwd):
    """``tfp-maf ARGS`` run in this process (TensorFlow is imported already), in ``cwd``:
    its exit code, stdout and stderr."""
    from tfp_maf_cli import main

    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else 1
                if not isinstance(exit_.code, int):
                    print(exit_.code, file=sys.stderr)
    finally:
        os.chdir(here)
    return types.SimpleNamespace(returncode=code, stdout=out.getvalue(), stderr=err.getvalue())


def _write(path, names, values):
    suffix = path.suffix
    if suffix == ".csv":
        lines = [",".join(names)] + [",".join(repr(float(v)) for v in row) for row in values]
        path.write_text("\n".join(lines) + "\n")
    elif suffix == ".npy":
        np.save(path, values)
    elif suffix == ".npz":
        np.savez(path, **{n: values[:, i] for i, n in enumerate(names)})
    else:
        import pandas as pd

        pd.DataFrame(values, columns=names).to_parquet(path)


@pytest.mark.parametrize("suffix", [".csv", ".parquet", ".npy", ".npz"])
def test_command_line_on_a_users_file(tmp_path, suffix):
    rng = np.random.default_rng(0)
    x, _ = _banana(600, 0)
    table = np.column_stack([x[:, 0] * 1000 + 1e5, x[:, 1] * 10 - 300, rng.normal(size=600)])
    names = ["temp", "pressure", "cond"] if suffix != ".npy" else ["0", "1", "2"]
    path = tmp_path / f"table{suffix}"
    _write(path, names, table)
    run = _cli("train", "--data", str(path), "--condition-on", names[2], "--out", "run", "--max-epochs", "2",
               "--model", "maf5", "--quiet", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    metrics = json.loads(run.stdout)
    assert metrics["conditional"] and np.isfinite(metrics["test_log_likelihood"])
    record = json.loads((tmp_path / "run" / "table.json").read_text())
    assert record["columns"] == names[:2] and record["condition_on"] == names[2:]
    score = _cli("score", "--out", "run", "--data", str(path), cwd=tmp_path)
    lines = score.stdout.splitlines()
    assert score.returncode == 0 and lines[0] == "log_prob" and len(lines) == 601, score.stderr
    assert score.stderr == ""
    sample = _cli("sample", "--out", "run", "-n", "4", "--format", "csv", "--given", f"{names[2]}=0.5", cwd=tmp_path)
    assert sample.returncode == 0 and sample.stdout.splitlines()[0] == ",".join(names[:2]), sample.stderr
    assert len(sample.stdout.splitlines()) == 5
    evaluate = _cli("evaluate", "--out", "run", cwd=tmp_path)
    assert json.loads(evaluate.stdout)["test_log_likelihood"] == pytest.approx(metrics["test_log_likelihood"])


def test_command_line_answers_bad_files_in_one_line(tmp_path):
    x, _ = _banana(300, 0)
    good = tmp_path / "good.csv"
    _write(good, ["a", "b"], x)
    lines = good.read_text().splitlines()
    cases = {
        "nan.csv": (lines[:5] + ["nan,1.0"] + lines[6:], "non-finite row .* row 5 "),
        "const.csv": ([line + (",c" if i == 0 else ",5.0") for i, line in enumerate(lines)],
                      "a constant column: 'c'"),
        "text.csv": (lines[:9] + ["1.0,abc"] + lines[10:], r"line 10, column 'b': 'abc' is not a number"),
    }
    for name, (content, message) in cases.items():
        (tmp_path / name).write_text("\n".join(content) + "\n")
        run = _cli("train", "--data", name, "--out", f"run_{name}", "--max-epochs", "1", "--quiet", cwd=tmp_path)
        assert run.returncode == 1 and len(run.stderr.strip().splitlines()) == 1, run.stderr
        assert re.search(message, run.stderr), run.stderr
        assert not (tmp_path / f"run_{name}").exists()  # refused before anything was written
    assert _cli("train", "--data", "good.csv", "--out", "run", "--max-epochs", "1", "--quiet",
                cwd=tmp_path).returncode == 0
    other = tmp_path / "other.csv"
    _write(other, ["a", "z"], x)
    run = _cli("score", "--out", "run", "--data", "other.csv", cwd=tmp_path)
    assert run.returncode == 1 and "no column 'b'" in run.stderr and len(run.stderr.strip().splitlines()) == 1


def test_the_gaussian_fits_raw_units_in_closed_form():
    """The Gaussian takes no standardisation: its closed form is the same fit in any
    units, its jitter relative to each variance."""
    plain, raw = km.Gaussian(2).fit_closed_form(X), km.Gaussian(2).fit_closed_form(X * SCALE + SHIFT)
    ll_plain = float(np.mean(plain.log_prob(X_TEST)))
    ll_raw = float(np.mean(raw.log_prob(X_TEST * SCALE + SHIFT))) + float(np.log(SCALE).sum())
    assert abs(ll_raw - ll_plain) < 1e-3
    assert "standardize" not in km.zoo.model_keywords("gaussian")
