"""Training with Keras' standard machinery: callbacks, resuming, jit_compile, and the
command line on the benchmark datasets (small files in the archive's formats)."""

from __future__ import annotations

import gzip
import json
import math
import pickle
import re
from unittest import mock

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_models as km
from keras_models import data, training


def _figure1(n=400):
    return data.load_figure1(n_train=n, n_val=100, n_test=100)


def _model():
    model = km.MAF(2, hidden_units=[8], num_layers=2, seed=0)
    return training.compile_as_paper(model, "maf5")


class _StopAtEpoch(keras.callbacks.Callback):
    """Simulates a crash after ``epoch`` has finished (and been backed up)."""

    def __init__(self, epoch):
        super().__init__()
        self.epoch = epoch

    def on_epoch_end(self, epoch, logs=None):
        if epoch == self.epoch:
            raise KeyboardInterrupt("simulated crash")


def test_tensorboard_csv_logger_and_checkpoints(tmp_path):
    splits = _figure1()
    train, val, *_ = splits.pipelines(batch_size=100)
    model = _model()
    callbacks = [
        keras.callbacks.TensorBoard(log_dir=str(tmp_path / "tb")),
        keras.callbacks.CSVLogger(str(tmp_path / "log.csv")),
        keras.callbacks.ModelCheckpoint(str(tmp_path / "best.keras"), monitor="val_loss", save_best_only=True),
    ]
    history, info = training.fit_as_paper(model, train, val, splits.x_train, max_epochs=3,
                                          callbacks=callbacks, verbose=0)
    rows = (tmp_path / "log.csv").read_text().strip().splitlines()
    assert rows[0].split(",") == ["epoch", "loss", "val_loss"] and len(rows) == 4
    assert list((tmp_path / "tb").rglob("events.out.tfevents.*"))
    best = keras.saving.load_model(tmp_path / "best.keras", safe_mode=True)
    assert math.isfinite(float(best.evaluate(val, verbose=0)))


def test_backup_and_restore_resumes_after_a_crash(tmp_path):
    splits = _figure1()
    train, val, *_ = splits.pipelines(batch_size=100)
    backup = str(tmp_path / "backup")
    model = _model()
    with pytest.raises(KeyboardInterrupt):
        model.fit(train, validation_data=val, epochs=4, verbose=0,
                  callbacks=[keras.callbacks.BackupAndRestore(backup), _StopAtEpoch(1)])
    weights_at_crash = [w.numpy() for w in model.weights]

    resumed = _model()
    history = resumed.fit(train, epochs=4, verbose=0, callbacks=[keras.callbacks.BackupAndRestore(backup)])
    # Epochs 0 and 1 were done: only 2 and 3 run again, from the backed-up weights.
    assert len(history.history["loss"]) == 2
    assert history.epoch == [2, 3]
    assert any(not np.array_equal(a, b.numpy()) for a, b in zip(weights_at_crash, resumed.weights, strict=True))


def test_fit_as_paper_reads_each_epochs_pass_as_a_fresh_iterator_would():
    """fit_as_paper reads repeated pipelines from one iterator for the whole run: each
    epoch must still see the pass a fresh iterator of that epoch gives (the shuffle of
    that epoch, the short last batch), as a plain fit with ShuffleEpoch does."""
    splits = _figure1(n=250)  # 3 batches of 100: the last one short

    def run(paper: bool):
        keras.utils.set_random_seed(0)
        # standardize=False, as the paper's protocol builds it: a pass of the pipeline for the
        # statistics would move the plain fit's shuffles by an epoch.
        model = training.compile_as_paper(km.MAF(2, hidden_units=[8], num_layers=2, seed=0, standardize=False), "maf5",
                                          jit_compile=False, steps_per_execution=1)
        pipes = splits.pipelines(batch_size=100, seed=3)
        if paper:
            history, _ = training.fit_as_paper(model, pipes.train, pipes.validation, splits.x_train,
                                               max_epochs=4, verbose=0, shuffle_epoch=pipes.epoch)
        else:
            from keras_models.batch_norm_statistics import BatchNormStatistics

            history = model.fit(pipes.train, validation_data=pipes.validation, epochs=4, verbose=0,
                                shuffle=False, callbacks=[training.ShuffleEpoch(pipes.epoch),
                                                          BatchNormStatistics(splits.x_train)])
        return history.history

    paper, plain = run(True), run(False)
    assert paper["loss"] == plain["loss"] and paper["val_loss"] == plain["val_loss"]


def test_fit_as_paper_validates_in_the_statistics_call_where_it_can_and_by_keras_elsewhere():
    """A validation set of one batch and a training set of one call: the validation
    rides on the statistics pass (`ValidationWithStatistics`); in two batches, Keras
    validates. The losses agree, and so does the training."""
    from keras_models.batch_norm_statistics import ValidationWithStatistics

    splits = _figure1(n=250)
    original = ValidationWithStatistics.on_epoch_end

    def run(eval_batch_size):
        keras.utils.set_random_seed(0)
        model = training.compile_as_paper(km.MAF(2, hidden_units=[8], num_layers=2, seed=0), "maf5",
                                          jit_compile=False)
        pipes = splits.pipelines(batch_size=100, eval_batch_size=eval_batch_size, seed=3)
        with mock.patch.object(ValidationWithStatistics, "on_epoch_end", autospec=True,
                               side_effect=original) as validated:
            history, _ = training.fit_as_paper(model, pipes.train, pipes.validation, splits.x_train,
                                               max_epochs=3, verbose=0, shuffle_epoch=pipes.epoch)
        return history.history, validated.call_count

    (one_batch, calls), (two_batches, no_calls) = run(100), run(60)
    assert (calls, no_calls) == (3, 0)
    assert one_batch["loss"] == two_batches["loss"]
    np.testing.assert_allclose(one_batch["val_loss"], two_batches["val_loss"], rtol=1e-6)


class MovesEveryEntry(keras.optimizers.SGD):
    """An optimizer of the user's whose step writes every kernel entry (its name is the
    root of a TF name scope: no leading underscore)."""

    def update_step(self, gradient, variable, learning_rate):
        variable.assign_add(keras.ops.ones_like(variable) * 0.01)


@pytest.mark.parametrize("optimizer", ["Adam", "FusedAdam", "SGD", "moves every entry"])
def test_fit_keeps_the_kernels_zeros_outside_their_masks(optimizer):
    """The train step leaves out the masks' projection after a Keras optimizer's update
    (it keeps the zeros itself); another optimizer's update gets the projection."""
    make = {"Adam": keras.optimizers.Adam, "FusedAdam": km.optimizers.FusedAdam, "SGD": keras.optimizers.SGD,
            "moves every entry": MovesEveryEntry}[optimizer]
    x = np.random.default_rng(0).normal(size=(200, 3)).astype(np.float32)
    model = km.MAF(3, hidden_units=[16], num_layers=2, seed=0)
    model.compile(optimizer=make(0.05))
    before = [layer.kernel.numpy() for made in model.mades for layer in (*made.hidden_layers, made.output_layer)]
    model.fit(x, batch_size=50, epochs=2, verbose=0)
    layers = [layer for made in model.mades for layer in (*made.hidden_layers, made.output_layer)]
    for layer, initial in zip(layers, before, strict=True):
        np.testing.assert_array_equal(layer.kernel.numpy() * (1 - layer.mask), 0.0)
        assert not np.array_equal(layer.kernel.numpy(), initial)  # trained


def test_jit_compile_trains_and_matches_the_graph_loss():
    splits = _figure1()
    train, val, *_ = splits.pipelines(batch_size=100)
    model = km.MAF(2, hidden_units=[8], num_layers=2, seed=0)
    training.compile_as_paper(model, "maf5", jit_compile=True)
    history = model.fit(train, epochs=2, verbose=0)
    assert all(math.isfinite(v) for v in history.history["loss"])
    jit_loss = model.evaluate(val, verbose=0)
    model.compile(optimizer=model.optimizer, jit_compile=False)
    assert model.evaluate(val, verbose=0) == pytest.approx(jit_loss, rel=1e-4)


@pytest.mark.parametrize(("rows", "max_epochs", "xla"), [(200, 1000, False), (10_000, 1000, True), (10_000, 2, False)],
                         ids=["short run", "long run", "few epochs"])
def test_auto_xla_is_off_for_a_run_too_short_to_repay_compiling(rows, max_epochs, xla):
    """jit_compile="auto": XLA unless (patience + 1) epochs, or max_epochs if fewer, take
    fewer steps than XLA_BREAK_EVEN_STEPS, and one step per call without it unless
    steps_per_execution was given; True and False are kept as given."""
    from keras_models.data.pipeline import array_dataset

    x = np.random.default_rng(0).normal(size=(rows, 2)).astype(np.float32)
    train = array_dataset(x, batch_size=100)
    model = training.compile_as_paper(km.MADE(2, hidden_units=[4]), "made")  # "auto"
    assert model.jit_compile is True  # until fit_as_paper knows the run
    training._decide_xla(model, train, patience=30, max_epochs=max_epochs)  # what fit_as_paper does first
    assert model.jit_compile is xla, (rows, max_epochs, training.XLA_BREAK_EVEN_STEPS)
    assert model.steps_per_execution == (10 if xla else 1)
    fixed = training.compile_as_paper(km.MADE(2, hidden_units=[4]), "made", jit_compile=True)
    training._decide_xla(fixed, train, patience=30, max_epochs=max_epochs)
    assert fixed.jit_compile is True
    given = training.compile_as_paper(km.MADE(2, hidden_units=[4]), "made", steps_per_execution=5)
    training._decide_xla(given, train, patience=30, max_epochs=max_epochs)
    assert (given.jit_compile, given.steps_per_execution) == (xla, 5)


# Elementwise ops of one input, whose chains TF's CPU graph optimiser (its arithmetic
# optimiser) fuses into one composed-unary-ops kernel. At a batch of 100 rows that kernel takes
# about 70 us where Neg and Exp take 2 (2 cores): five of them were a tenth of a small MAF
# (5)'s train step. Sampling keeps its chains (a Gumbel draw, a batch norm's [D] scale): one
# per call, not per step.
_FUSED_UNARY = {
    "Abs", "Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "Ceil", "Cos", "Cosh", "Elu",
    "Exp", "Expm1", "Floor", "Inv", "Log", "Log1p", "Neg", "Reciprocal", "Relu", "Relu6",
    "Rint", "Round", "Rsqrt", "Selu", "Sigmoid", "Sin", "Sinh", "Sqrt", "Square", "Tan", "Tanh",
}


def _unary_chains(graph_def):
    """The chains of two `_FUSED_UNARY` ops in a graph and the functions it calls."""
    found = []
    for nodes in [graph_def.node, *(f.node_def for f in graph_def.library.function)]:
        by_name = {node.name: node for node in nodes}
        for node in nodes:
            source = by_name.get(node.input[0].split(":")[0]) if node.input else None
            if node.op in _FUSED_UNARY and source is not None and source.op in _FUSED_UNARY:
                found.append(f"{source.op} -> {node.op} ({node.name})")
    return found


@pytest.mark.parametrize("conditional", [False, True])
@pytest.mark.parametrize("name", ["made", "made-mog", "maf5", "maf-mog5", "realnvp5", "nsf5"])
def test_no_train_step_or_log_prob_leaves_a_unary_chain_for_the_slow_fused_kernel(name, conditional):
    from conftest import zoo_model

    model = zoo_model(name, 3, hidden_units=[8], num_layers=2, conditional_dims=2 if conditional else None)
    training.compile_as_paper(model, name, jit_compile=False)
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((16, 3), np.float32), rng.standard_normal((16, 2), np.float32)
    given = (y,) if conditional else ()
    model.fit(x, *given, batch_size=8, epochs=1, verbose=0)  # builds the optimizer and the masks
    graphs = {
        "train step": tf.function(model.train_step, autograph=False).get_concrete_function((x, *given)),
        "log_prob": tf.function(model.log_prob, autograph=False).get_concrete_function(x, *given),
    }
    found = {what: _unary_chains(f.graph.as_graph_def()) for what, f in graphs.items()}
    assert found == {"train step": [], "log_prob": []}


@pytest.mark.parametrize("jit_compile", [False, True])
@pytest.mark.parametrize("kind", ["maf", "made_mog"])
def test_fit_takes_the_steps_a_gradient_tape_loop_takes(kind, jit_compile):
    # fit masks the MADEs' gradients after the tape (`kernels_as_stored`), a
    # plain loop through the kernel * mask product: the same steps, blocks or not.
    # SGD with momentum, not Adam, whose normalised steps turn rounding noise in a
    # near-zero gradient into steps of the learning rate; its momentum shows the
    # gradients the optimizer saw, zeros outside the masks included.
    from tfp_maf.testing import randomize_weights

    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((300, 3)).astype("float32"), rng.standard_normal((300, 2)).astype("float32")

    def make():
        # standardize=False: the tape loop below takes no statistics, as fit's first call would.
        kwargs = dict(hidden_units=[16, 16], conditional_dims=2, seed=0, kernel_blocks=2, standardize=False)
        model = km.MAF(3, num_layers=2, **kwargs) if kind == "maf" else km.MADEMoG(3, num_components=2, **kwargs)
        randomize_weights(model, 1, scale=0.2)  # every kernel gets a gradient from the first step
        return model

    fitted = make()
    fitted.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9), jit_compile=jit_compile)
    fitted.fit((x, y), batch_size=100, epochs=1, shuffle=False, verbose=0)
    looped, optimizer = make(), keras.optimizers.SGD(0.05, momentum=0.9)
    for i in range(0, 300, 100):
        with tf.GradientTape() as tape:
            loss = -tf.reduce_mean(looped.log_prob(x[i : i + 100], y[i : i + 100], training=True))
            loss += tf.add_n(looped.losses) if looped.losses else 0.0
        optimizer.apply(tape.gradient(loss, looped.trainable_variables), looped.trainable_variables)
    # The trained weights (fit also stores the batch norms' statistics, which the loop
    # does not: tests/test_batch_norm_statistics.py).
    for a, b in zip(fitted.trainable_weights, looped.trainable_weights, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
    for a, b in zip(fitted.optimizer.variables, optimizer.variables, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
    assert not np.allclose(fitted.get_weights()[0], make().get_weights()[0])  # it did train


class _TripledL2(keras.regularizers.L2):
    """A subclass of Keras' L2 that computes otherwise: the fit step must not read it as L2."""

    def __call__(self, x):
        return 3.0 * super().__call__(x)


def test_fit_adds_l2_gradients_itself_and_leaves_other_regularizers_to_the_losses():
    # The fit step adds 2 l2 w to the gradient of each weight whose regularizer is Keras'
    # L2, and takes any other regularizer (an L1, a subclass of L2) from model.losses: the
    # same steps as a loop that differentiates model.losses, with a penalty large enough
    # to show, and every regularizer back in place after.
    rng = np.random.default_rng(1)
    x = rng.standard_normal((200, 3)).astype("float32")

    def make():
        # standardize=False: the tape loop below takes no statistics, as fit's first call would.
        model = km.MAF(3, hidden_units=[16, 16], num_layers=2, l2=0.05, seed=0, standardize=False)
        regularized = [v for v in model.trainable_variables if v.regularizer is not None]
        regularized[0].regularizer = keras.regularizers.L1(0.01)
        regularized[1].regularizer = _TripledL2(0.05)
        return model

    fitted = make()
    before = [(v.path, v.regularizer) for v in fitted.trainable_variables]
    assert sum(type(r) is keras.regularizers.L2 for _, r in before) >= 4
    fitted.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9), jit_compile=False)
    penalties = []  # the regularizers whose penalty the step traces
    l2_call = keras.regularizers.L2.__call__

    def spied(self, x):
        penalties.append(type(self))
        return l2_call(self, x)

    with mock.patch.object(keras.regularizers.L2, "__call__", spied):
        fitted.fit(x, batch_size=100, epochs=1, shuffle=False, verbose=0)
    assert penalties == [_TripledL2]  # Keras' L2s by their gradient alone
    assert [(v.path, v.regularizer) for v in fitted.trainable_variables] == before
    looped, optimizer = make(), keras.optimizers.SGD(0.05, momentum=0.9)
    for i in range(0, 200, 100):
        with tf.GradientTape() as tape:
            loss = -tf.reduce_mean(looped.log_prob(x[i : i + 100], training=True)) + tf.add_n(looped.losses)
        optimizer.apply(tape.gradient(loss, looped.trainable_variables), looped.trainable_variables)
    for a, b in zip(fitted.trainable_weights, looped.trainable_weights, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
    # Without the penalties the steps differ: the check above sees them.
    plain, optimizer = make(), keras.optimizers.SGD(0.05, momentum=0.9)
    for i in range(0, 200, 100):
        with tf.GradientTape() as tape:
            loss = -tf.reduce_mean(plain.log_prob(x[i : i + 100], training=True))
        optimizer.apply(tape.gradient(loss, plain.trainable_variables), plain.trainable_variables)
    assert not all(np.allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
                   for a, b in zip(fitted.trainable_weights, plain.trainable_weights, strict=True))


def test_step_counts_run_exactly_or_are_refused():
    # Keras 3 runs whole executions of steps_per_execution (10 here) steps: a count
    # that is not a multiple would silently train or evaluate more than was asked.
    train = _figure1().pipelines(batch_size=100).train.repeat()
    model = training.compile_as_paper(km.MAF(2, hidden_units=[8], num_layers=2, seed=0), "maf5",
                                      jit_compile=False)
    model.fit(train, steps_per_epoch=20, epochs=1, verbose=0)
    assert int(model.optimizer.iterations.numpy()) == 20
    for call in (
        lambda: model.fit(train, steps_per_epoch=25, epochs=1, verbose=0),
        lambda: model.fit(train, epochs=1, steps_per_epoch=10, validation_data=train,
                          validation_steps=3, verbose=0),
        lambda: model.evaluate(train, steps=3, verbose=0),
        lambda: model.predict(train, steps=3, verbose=0),
    ):
        with pytest.raises(ValueError, match=r"is not a multiple of steps_per_execution=10; "
                                             r"Keras would run \d+ steps"):
            call()
    assert int(model.optimizer.iterations.numpy()) == 20  # nothing ran
    # One step per execution: any count runs exactly.
    model = training.compile_as_paper(km.MAF(2, hidden_units=[8], num_layers=2, seed=0), "maf5",
                                      jit_compile=False, steps_per_execution=1)
    model.fit(train, steps_per_epoch=3, epochs=1, verbose=0)
    assert int(model.optimizer.iterations.numpy()) == 3


# --------------------------------------------------------------------------- command line

def _write_mnist(root, n=(60, 20, 20)):
    rng = np.random.RandomState(0)
    parts = tuple(
        ((rng.randint(0, 256, size=(k, 784)) / 256.0).astype(np.float32), np.arange(k) % 10) for k in n
    )
    (root / "mnist").mkdir(parents=True)
    with gzip.open(root / "mnist" / "mnist.pkl.gz", "wb") as f:
        pickle.dump(parts, f, protocol=2)


@pytest.mark.parametrize("model", ["gaussian", "made"])
def test_cli_conditional_mnist_reports_both_likelihoods_and_bits_per_pixel(tmp_path, capsys, model):
    from tfp_maf_cli import main

    _write_mnist(tmp_path / "data")
    out = tmp_path / "run"
    # The Gaussian, fitted in closed form, has no hidden layers and no epochs.
    options = [] if model == "gaussian" else ["--hidden-units", "16", "--max-epochs", "1"]
    main(["train", "--dataset", "mnist", "--data-dir", str(tmp_path / "data"), "--model", model,
          "--conditional", *options, "--out", str(out)])
    metrics = json.loads((out / "metrics.json").read_text())
    for key in ("test_log_likelihood", "test_conditional_log_likelihood", "test_bits_per_pixel"):
        assert math.isfinite(metrics[key]) and metrics[f"{key}_2se"] >= 0
    # log p(x) = log mean_y p(x | y) cannot exceed... it is below the best class's, and a
    # model conditioned on the true label does at least as well on average here.
    assert metrics["conditional"] is True
    capsys.readouterr()
    main(["sample", "--out", str(out), "-n", "2", "--label", "3"])
    assert np.asarray(json.loads(capsys.readouterr().out)["samples"]).shape == (2, 784)
    with pytest.raises(SystemExit, match="pass --label"):
        main(["sample", "--out", str(out), "-n", "2"])


def test_cli_uses_the_paper_presets(tmp_path):
    from tfp_maf_cli import main

    raw = np.random.RandomState(0).normal(size=(400, 43))
    (tmp_path / "data" / "miniboone").mkdir(parents=True)
    np.save(tmp_path / "data" / "miniboone" / "data.npy", raw)
    main(["train", "--dataset", "miniboone", "--data-dir", str(tmp_path / "data"), "--model", "made",
          "--max-epochs", "1", "--out", str(tmp_path / "run")])
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["hidden_units"] == [512] and metrics["dataset"] == "miniboone"
    assert metrics["learning_rate"] == pytest.approx(1e-3)  # the paper's step size for MADE
    assert math.isfinite(metrics["test_log_likelihood"])
    main(["train", "--dataset", "miniboone", "--data-dir", str(tmp_path / "data"), "--model", "made",
          "--max-epochs", "1", "--out", str(tmp_path / "other"), "--learning-rate", "1e-4", "--quiet"])
    assert json.loads((tmp_path / "other" / "metrics.json").read_text())["learning_rate"] == pytest.approx(1e-4)


def test_cli_bad_input_gets_a_message_not_a_traceback(tmp_path):
    from tfp_maf_cli import main

    with pytest.raises(SystemExit, match=r"tfp-maf: power: file not found: .*power/data.npy"):
        main(["train", "--dataset", "power", "--data-dir", str(tmp_path), "--out", str(tmp_path / "r")])
    with pytest.raises(SystemExit, match="--conditional needs labelled data; figure1 has no labels"):
        main(["train", "--conditional", "--out", str(tmp_path / "r")])
    for command in (["evaluate"], ["sample", "-n", "2"], ["export"]):
        with pytest.raises(SystemExit, match=r"no trained model at .*model.keras; run `tfp-maf train --out"):
            main([*command, "--out", str(tmp_path / "nothing")])


def test_cli_a_file_where_a_directory_goes_says_so_and_what_to_pass(tmp_path):
    """Not pathlib's FileExistsError from ``train``, nor "train first" into a file."""
    from tfp_maf_cli import main

    notes = tmp_path / "notes.txt"
    notes.write_text("")
    with pytest.raises(SystemExit, match=r"^tfp-maf: --out .*notes.txt is a file, not a directory; pass a "
                                         r"directory to create, or an existing run directory"):
        main(["train", "--out", str(notes)])
    model_file = tmp_path / "model.keras"  # the model, given for its run directory
    model_file.write_text("")
    run_dir = re.escape(str(tmp_path))
    for command in ("evaluate", "sample", "export"):
        with pytest.raises(SystemExit, match=r"--out .*model.keras is a file, not a directory; pass the run "
                                             rf"directory .*, which holds model.keras: here, --out {run_dir}\.$"):
            main([command, "--out", str(model_file)])
    with pytest.raises(SystemExit, match="--saved-model .*notes.txt is a file, not a directory; pass a directory"):
        main(["export", "--out", str(tmp_path), "--saved-model", str(notes)])
    with pytest.raises(SystemExit, match="--results .*notes.txt is a file, not a directory"):
        main(["reproduce", "--results", str(notes)])
