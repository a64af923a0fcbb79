"""Reliability: a killed run resumes exactly, the same seed gives the same weights,
and odd data never turns into silent NaNs."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_models as km
from keras_models import data, training
from keras_models.evaluation import log_likelihoods
from tfp_maf._platform import compat

ROOT = Path(__file__).resolve().parents[1]

# A small MAF on the embedded Figure 1 density: about 0.2 s an epoch.
TRAIN = ["train", "--model", "maf5", "--hidden-units", "16", "16", "--max-epochs", "12",
         "--patience", "4", "--deterministic"]


def _cli(out, *extra):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    return [sys.executable, "-m", "tfp_maf_cli", *TRAIN, "--out", str(out), *extra], env


def _weights(out):
    model = keras.saving.load_model(Path(out) / "model.keras", safe_mode=True)
    return model.get_weights()


def test_a_run_killed_mid_epoch_resumes_to_the_same_result(tmp_path):
    cmd, env = _cli(tmp_path / "whole")
    subprocess.run(cmd, env=env, check=True, capture_output=True)
    whole = json.loads((tmp_path / "whole" / "metrics.json").read_text())

    cmd, env = _cli(tmp_path / "killed")
    state = tmp_path / "killed" / "backup" / "state.json"
    process = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not (state.exists() and json.loads(state.read_text())["epoch"] >= 3):
            assert process.poll() is None, "the run ended before it could be killed"
            assert time.monotonic() < deadline, "no backup of epoch 3 within 2 minutes"
            time.sleep(0.02)
        time.sleep(0.05)  # into the next epoch
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    assert not (tmp_path / "killed" / "metrics.json").exists()

    # The same command again: it resumes from the backup and finishes.
    subprocess.run(cmd, env=env, check=True, capture_output=True)
    resumed = json.loads((tmp_path / "killed" / "metrics.json").read_text())
    assert resumed["resumed_from_epoch"] >= 3
    assert resumed["epochs"] == whole["epochs"]
    assert resumed["test_log_likelihood"] == whole["test_log_likelihood"]
    for a, b in zip(_weights(tmp_path / "whole"), _weights(tmp_path / "killed"), strict=True):
        np.testing.assert_array_equal(a, b)
    assert not (tmp_path / "killed" / "backup").exists()  # removed once the model is saved


def test_resuming_with_other_arguments_is_refused(tmp_path):
    (tmp_path / "backup").mkdir()
    (tmp_path / "backup" / "state.json").write_text('{"epoch": 1, "weights": "w.h5"}')
    (tmp_path / "args.json").write_text(json.dumps({"model": "made", "seed": 0}))
    import tfp_maf_cli as cli

    with pytest.raises(SystemExit, match="other arguments .*--model 'made' then, 'maf5' now"):
        cli.main(["train", "--model", "maf5", "--out", str(tmp_path)])


def test_a_run_out_of_time_goes_on_with_the_same_command_however_its_paths_are_written(tmp_path, monkeypatch):
    # --max-minutes ends a call, not the run: its backup stays and the same command goes on,
    # with the run directory or the data root written another way (relative, absolute, a
    # trailing slash, $TFP_MAF_DATA). A budget of 0.0001 minutes ends each call after an epoch.
    import tfp_maf_cli as cli

    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    common = ["train", "--model", "made", "--hidden-units", "8", "--max-epochs", "3", "--quiet"]
    budget = ["--max-minutes", "0.0001"]
    cli.main([*common, *budget, "--out", "run", "--data-dir", "data"])
    first = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert (first["epochs"], first["finished"]) == (1, False) and (tmp_path / "run" / "backup").exists()
    cli.main([*common, *budget, "--out", str(tmp_path / "run"), "--data-dir", str(tmp_path / "data") + "/"])
    second = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert (second["epochs"], second["resumed_from_epoch"], second["finished"]) == (2, 1, False)
    monkeypatch.setenv("TFP_MAF_DATA", str(tmp_path / "data"))
    cli.main([*common, "--out", "./run"])  # no budget this time: it finishes
    last = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert (last["epochs"], last["resumed_from_epoch"], last["finished"]) == (3, 2, True)
    assert not (tmp_path / "run" / "backup").exists()
    with pytest.raises(SystemExit, match="other arguments .*--data-dir"):  # another root is another run
        (tmp_path / "run" / "backup").mkdir()
        cli.main([*common, "--out", "run", "--data-dir", "elsewhere"])


def test_damaged_run_files_and_ctrl_c_get_one_line_that_says_what_to_do(tmp_path, monkeypatch, capsys):
    import tfp_maf_cli as cli
    from keras_models.callbacks import RunBackup

    (tmp_path / "backup").mkdir()
    (tmp_path / "args.json").write_text("{bad")
    with pytest.raises(SystemExit, match=r"args.json is not valid JSON \(Expecting property name.*\); delete"):
        cli.main(["train", "--out", str(tmp_path)])
    (tmp_path / "backup" / "state.json").write_text('{"epoch": 1')
    with pytest.raises(ValueError, match=r"state.json is not valid JSON .*delete .*backup to start the run afresh"):
        RunBackup(tmp_path / "backup").saved_epoch()

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "cmd_train", interrupted)
    with pytest.raises(SystemExit) as done:
        cli.main(["train", "--out", str(tmp_path / "other")])
    assert done.value.code == 130
    assert capsys.readouterr().err.strip() == "tfp-maf: interrupted. The same command resumes it from its last epoch."


def test_a_finished_run_is_trained_again_only_on_request_and_keeps_its_model(tmp_path):
    import tfp_maf_cli as cli

    args = ["train", "--model", "gaussian", "--out", str(tmp_path)]
    cli.main(args)
    first = (tmp_path / "model.keras").read_bytes()
    with pytest.raises(SystemExit, match="holds a finished run \\(gaussian on figure1, .* test log-likelihood "
                                         "-[0-9.]+\\). Pass a new --out .* or --restart"):
        cli.main(args)
    assert (tmp_path / "model.keras").read_bytes() == first  # untouched
    cli.main([*args, "--restart"])
    assert (tmp_path / "model.previous.keras").read_bytes() == first


@pytest.fixture
def op_determinism():
    tf.config.experimental.enable_op_determinism()
    yield
    assert compat.disable_op_determinism(), "TF cannot turn op determinism off: see tfp_maf._platform.compat"


def _steps(seed, steps=30):
    keras.utils.set_random_seed(seed)
    splits = data.load_figure1(n_train=3000, n_val=100, n_test=100, seed=seed)
    model = training.compile_as_paper(km.MAF(2, hidden_units=[32, 32], num_layers=3, seed=seed), "maf5")
    train = splits.pipelines(batch_size=100, seed=seed).train
    model.fit(train.repeat(), steps_per_epoch=steps, epochs=1, verbose=0)
    return model.get_weights()


def test_the_same_seed_gives_identical_weights(op_determinism):
    first, second = _steps(3), _steps(3)
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a, b)
    other = _steps(4)
    assert any(not np.array_equal(a, b) for a, b in zip(first, other, strict=True))


def test_op_determinism_turns_auto_xla_off_without_a_warning(op_determinism):
    # Keras compiles without XLA under op determinism; "auto" asked for XLA only where
    # it is supported, so only an explicit True keeps Keras' warning.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = training.compile_as_paper(km.MADE(2, hidden_units=[4]), "made")
    assert model.jit_compile is False
    with pytest.warns(UserWarning, match="jit_compile=True"):
        explicit = training.compile_as_paper(km.MADE(2, hidden_units=[4]), "made", jit_compile=True)
    assert explicit.jit_compile is False


# ----------------------------------------------------------------------------- numerical safety

def _finite(model, history):
    return np.all(np.isfinite(history.history["loss"])) and all(
        np.all(np.isfinite(w)) for w in model.get_weights()
    )


@pytest.mark.parametrize("name", ["made", "maf5", "maf-mog5", "realnvp5"])
def test_heavy_tailed_data_trains_1000_steps_without_nan(name):
    # Student-t with 1.5 degrees of freedom (no variance), scaled to reach 1e4.
    rng = np.random.default_rng(0)
    x = np.clip(5 * rng.standard_t(1.5, size=(100_000, 8)), -1e4, 1e4).astype(np.float32)
    assert np.abs(x).max() == 1e4
    keras.utils.set_random_seed(0)
    model = training.compile_as_paper(km.build(name, 8, hidden_units=[64, 64]), name)
    history = model.fit(data.array_dataset(x, batch_size=100, shuffle=True, seed=0), epochs=1, verbose=0)
    assert len(history.history["loss"]) == 1 and model.optimizer.iterations.numpy() == 1000
    assert _finite(model, history)


def test_maf_with_batch_norm_stays_at_the_entropy_of_a_standard_normal():
    # TFP's MAF with its batch norm drifts below the true entropy and reaches NaN
    # within a few hundred steps here; ours must not, over ten times as many. Fresh data
    # every step (no overfitting), the paper's settings: Adam at 1e-4, batch 100,
    # MINIBOONE's sizes.
    from keras_models import presets

    D, steps = 43, 2500
    rng = np.random.default_rng(1)
    x = rng.standard_normal((steps * 100, D)).astype(np.float32)
    x_test = rng.standard_normal((10_000, D)).astype(np.float32)
    keras.utils.set_random_seed(1)
    model = training.compile_as_paper(km.MAF(D, num_layers=5, **presets.model_kwargs("miniboone")), "maf5")
    history = model.fit(data.array_dataset(x, batch_size=100, shuffle=True, seed=1), epochs=1, verbose=0)
    assert model.optimizer.iterations.numpy() == steps and _finite(model, history)
    model.set_batch_norm_statistics(x)  # evaluation mode: training-set statistics
    exact = -D / 2 * np.log(2 * np.pi * np.e)  # -61.01
    assert abs(log_likelihoods(model, x_test).mean() - exact) < 0.1


def test_a_non_finite_loss_stops_training_and_keeps_the_last_good_weights(capsys):
    splits = data.load_figure1(n_train=1000, n_val=100, n_test=100)
    clean = tf.constant(splits.x_train)
    poisoned = tf.constant(np.where(np.arange(1000)[:, None] >= 500, 1e30, splits.x_train).astype(np.float32))
    epoch = tf.Variable(0, dtype=tf.int64)

    def batches(_):  # epochs 1 and 2 see clean data; from epoch 3 on the log-density overflows
        rows = tf.where(epoch >= 2, poisoned, clean)
        return tf.data.Dataset.from_tensor_slices(rows).batch(100)

    train = tf.data.Dataset.from_tensors(0).flat_map(batches).apply(tf.data.experimental.assert_cardinality(10))

    class Remember(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if epoch == 1:
                self.weights = [w.numpy() for w in self.model.trainable_weights]

    remember = Remember()
    # As the paper's protocol builds it: with log tails and bounded log-scales, rows at 1e30
    # would score finite (`tests/test_own_table.py`).
    model = training.compile_as_paper(km.MAF(2, hidden_units=[16], num_layers=2, seed=0, standardize=False,
                                             tails=None, log_scale_bound=None), "maf5")
    _, info = training.fit_as_paper(model, train, data.array_dataset(splits.x_val), splits.x_train,
                                    max_epochs=10, callbacks=[remember], verbose=0, shuffle_epoch=epoch)
    assert info["epochs"] == 3 and not info["early_stopped"]
    message = info["stopped_on_non_finite"]
    assert message.startswith("training stopped: the training loss became")
    assert "kept the weights of epoch 2" in message and message in capsys.readouterr().err
    for kept, good in zip(model.trainable_weights, remember.weights, strict=True):
        np.testing.assert_array_equal(kept.numpy(), good)
    assert np.all(np.isfinite(model.log_prob(splits.x_test).numpy()))


# ---------------------------------------------------------------------------------- bad input

@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A small conditional MAF, saved as .keras and exported as a SavedModel."""
    from keras_models.export import export_saved_model

    out = tmp_path_factory.mktemp("served")
    model = km.MAF(3, hidden_units=[16], num_layers=2, conditional_dims=2, seed=0)
    model.save(out / "model.keras")
    export_saved_model(model, str(out / "saved_model"))
    return model, out


def test_bad_x_and_y_name_what_was_expected(trained):
    model, _ = trained
    y = np.zeros((4, 2), np.float32)
    with pytest.raises(ValueError, match=r"expected x with 3 columns, got shape \[\]"):
        model.log_prob(np.float32(1.0), y)
    with pytest.raises(ValueError, match=r"expected x with 3 columns, got shape \[4, 5\]"):
        model.log_prob(np.zeros((4, 5), np.float32), y)
    with pytest.raises(TypeError, match="expected floating-point x, got string"):
        model.log_prob(np.array([["a", "b", "c"]]), y)
    with pytest.raises(ValueError, match=r"expected y with 2 columns, got shape \[4, 7\]"):
        model.log_prob(np.zeros((4, 3), np.float32), np.zeros((4, 7), np.float32))
    with pytest.raises(ValueError, match=r"expected integer labels in \[0, 10\), got values in \[-1, 12\]"):
        data.images.one_hot(np.array([-1, 3, 12]), 10)
    with pytest.raises(TypeError, match=r"expected x as an array or tensor, got a dict with keys \['x', 'y'\]"):
        model.log_prob({"x": np.zeros((4, 3), np.float32), "y": y})
    # A conditional model asked without y says how the call in hand takes it.
    x = np.zeros((4, 3), np.float32)
    for call, usage in ((lambda: model.log_prob(x), "log_prob(x, y)"), (model.distribution, "distribution(y)"),
                        (lambda: model.sample(2), "sample(n, y)"), (lambda: model(x), "pass (x, y)")):
        with pytest.raises(ValueError, match=rf"conditional on y with 2 columns: .*{re.escape(usage)}"):
            call()


def test_fit_works_after_a_first_fit_that_failed_on_bad_input():
    # Keras builds the optimizer in the step's first trace; when that trace failed,
    # every later fit raised "Creating variables on a non-first call" (plain Keras
    # models still do).
    model = km.MAF(3, hidden_units=[8], num_layers=2, conditional_dims=2, seed=0)
    model.compile(optimizer="adam")
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(16, 3)).astype(np.float32), rng.normal(size=(16, 2)).astype(np.float32)
    with pytest.raises(TypeError, match="got a dict with keys"):
        model.fit({"x": x, "y": y}, verbose=0)
    with pytest.raises(ValueError, match=r"expected x with 3 columns, got shape \[16, 5\]"):
        model.fit(np.zeros((16, 5), np.float32), y, verbose=0)
    history = model.fit(x, y, epochs=2, verbose=0).history
    assert np.all(np.isfinite(history["loss"])) and model.optimizer.iterations.numpy() == 2


def test_a_corrupt_keras_file_is_reported_and_the_cli_says_what_to_do(trained, tmp_path):
    import tfp_maf_cli as cli

    _, out = trained
    content = (out / "model.keras").read_bytes()
    (tmp_path / "model.keras").write_bytes(content[: len(content) // 2])
    with pytest.raises(SystemExit, match="could not read .*model.keras as a Keras model file.*truncated or corrupt"):
        cli.main(["sample", "--out", str(tmp_path), "-n", "2", "--label", "0"])


def test_saved_model_called_with_the_wrong_shape_names_the_expected_one(trained):
    _, out = trained
    served = tf.saved_model.load(str(out / "saved_model"))
    with pytest.raises((TypeError, ValueError)) as err:
        served.log_prob(tf.zeros([4, 5]), tf.zeros([4, 2]))
    message = str(err.value)
    assert "shape=(None, 3)" in message and "(4, 5)" in message


def test_saved_model_serves_1_to_10000_rows_and_10000_samples(trained):
    model, out = trained
    served = tf.saved_model.load(str(out / "saved_model"))
    for n in (1, 7, 10_000):
        x = np.random.default_rng(n).normal(size=(n, 3)).astype(np.float32)
        y = np.eye(2, dtype=np.float32)[np.arange(n) % 2]
        log_p = served.log_prob(x, y).numpy()
        assert log_p.shape == (n,) and np.all(np.isfinite(log_p))
        np.testing.assert_allclose(log_p, model.log_prob(x, y).numpy(), rtol=1e-5, atol=1e-5)
    samples = served.sample(tf.constant(10_000), tf.constant([1, 2]), tf.constant([0.0, 1.0])).numpy()
    assert samples.shape == (10_000, 3) and np.all(np.isfinite(samples))


def test_the_cli_says_in_one_line_what_it_cannot_write_and_nothing_of_tensorflow(tmp_path):
    # A path that cannot be made fails before any training, in one line; with
    # TF_CPP_MIN_LOG_LEVEL=3 (the usual way to silence TensorFlow) its start-up lines,
    # which that level does not reach, stay off stderr as when it is unset.
    import tfp_maf_cli as cli

    blocked = tmp_path / "a-file"
    blocked.write_text("")
    with pytest.raises(SystemExit, match=f"--out {re.escape(str(blocked / 'run'))} cannot be created"):
        cli.main(["train", "--out", str(blocked / "run")])
    with pytest.raises(SystemExit, match=f"--results {re.escape(str(blocked / 'results'))} cannot be created"):
        cli.main(["reproduce", "--no-figures", "--results", str(blocked / "results")])
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run([sys.executable, "-m", "tfp_maf_cli", "evaluate", "--out", str(tmp_path / "none")],
                          env=env, capture_output=True, text=True, timeout=300)
    missing = tmp_path / "none"
    expected = f"tfp-maf: no trained model at {missing / 'model.keras'}; run `tfp-maf train --out {missing}` first.\n"
    assert done.returncode == 1 and done.stderr == expected, done.stderr


def test_the_cli_piped_into_a_reader_that_leaves_ends_quietly(tmp_path):
    # `tfp-maf sample -n 20000 | head`: the reader closes the pipe; the command ends as
    # Unix filters do (128 + SIGPIPE), with no traceback.
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    command = [sys.executable, "-m", "tfp_maf_cli"]
    subprocess.run([*command, "train", "--model", "gaussian", "--quiet", "--out", str(tmp_path)],
                   env=env, check=True, capture_output=True, timeout=300)
    process = subprocess.Popen([*command, "sample", "--out", str(tmp_path), "-n", "20000"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout.read(10).startswith(b"{")
    process.stdout.close()
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=300) == 141 and "Traceback" not in stderr, stderr
