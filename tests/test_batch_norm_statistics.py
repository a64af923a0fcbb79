"""The evaluation-time batch-norm statistics pass (`keras_models.batch_norm_statistics`):
streamed over batches, the same figures as the whole training set mapped at once."""

from __future__ import annotations

import numpy as np
import pytest

import keras_models as km
import tfp_maf
from keras_models import batch_norm_statistics as bns
from keras_models import streamed_rows
from keras_models.optimizers import FusedAdam
from tfp_maf.layers import apply_masks


def _reference(model, x, y=None):
    """Each batch norm's mean and variance from the whole set mapped in one piece,
    in float64: the definition (appendix B of the paper)."""
    dist = model.distribution(None if y is None else y)
    current, out = x, []
    for b in dist.bijector.bijectors:
        if isinstance(b, tfp_maf.ExpGammaBatchNorm):
            values = np.asarray(current, np.float64)
            out.append((values.mean(0), values.var(0)))
            layer = next(layer for layer in bns.batch_norm_layers(model) if layer.name == b.name)
            layer.set_statistics(*out[-1])
        current = b.inverse(current, **tfp_maf.flow_kwargs(b, conditional_input=y)).numpy()
    return out


def _trained(conditional):
    rng = np.random.default_rng(0)
    x = (rng.normal(size=(523, 3)) * [1.0, 5.0, 0.1] + [0.0, 100.0, -3.0]).astype(np.float32)
    y = np.eye(2, dtype=np.float32)[rng.integers(0, 2, len(x))] if conditional else None
    model = km.MAF(3, hidden_units=[16], num_layers=3, conditional_dims=2 if conditional else None, seed=0)
    # Non-trivial MADEs and batch norms, so that each batch norm sees what the earlier ones did.
    for w in model.trainable_variables:
        w.assign(np.random.default_rng(1).normal(0.0, 0.3, w.shape).astype(np.float32))
    apply_masks(model)
    return model, x, y


@pytest.mark.parametrize("conditional", [False, True], ids=["unconditional", "conditional"])
@pytest.mark.parametrize(("in_memory", "batch_size"), [(True, 100), (False, 100), (True, None)],
                         ids=["rows-in-memory", "rows-in-a-file", "one-call"])
def test_streamed_statistics_equal_the_whole_set_at_once(conditional, in_memory, batch_size, monkeypatch):
    if not in_memory:
        monkeypatch.setattr(streamed_rows, "IN_MEMORY_BYTES", 0)  # the path of training sets above it
    model, x, y = _trained(conditional)
    reference = _reference(model, x, y)
    # 100: a batch that does not divide the 523 rows, the last one is short. None: the
    # default batch holds every row, and one traced call sets every batch norm.
    model.set_batch_norm_statistics(x, y, batch_size=batch_size)
    layers = bns.batch_norm_layers(model)
    assert len(layers) == len(reference) == 3
    for layer, (mean, variance) in zip(layers, reference, strict=True):
        np.testing.assert_allclose(layer.mean.numpy(), mean, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(layer.variance.numpy(), variance, rtol=1e-5)


def test_the_batch_size_does_not_change_the_statistics():
    model, x, _ = _trained(False)
    figures = []
    for batch_size in (None, 1, 64, 10_000):
        model.set_batch_norm_statistics(x, batch_size=batch_size)
        figures.append([(l.mean.numpy(), l.variance.numpy()) for l in bns.batch_norm_layers(model)])
    for other in figures[1:]:
        for (m0, v0), (m, v) in zip(figures[0], other, strict=True):
            np.testing.assert_allclose(m, m0, rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose(v, v0, rtol=1e-5)


def test_a_failed_one_call_pass_keeps_the_statistics_set_before():
    model, x, _ = _trained(False)
    model.set_batch_norm_statistics(x)
    before = [(l.mean.numpy(), l.variance.numpy()) for l in bns.batch_norm_layers(model)]
    bad = x.copy()
    bad[0, 1] = np.inf
    with pytest.raises(ValueError, match="batch_norm_0: the mean has non-finite values"):
        model.set_batch_norm_statistics(bad)
    for layer, (mean, variance) in zip(bns.batch_norm_layers(model), before, strict=True):
        np.testing.assert_array_equal(layer.mean.numpy(), mean)
        np.testing.assert_array_equal(layer.variance.numpy(), variance)


def test_moments_combine_stably_far_from_zero():
    # A large mean and a small spread: the naive E[x^2] - E[x]^2 loses every digit here.
    rng = np.random.default_rng(0)
    x = 1e6 + rng.normal(0.0, 1e-2, size=(10_001, 2))
    total = streamed_rows.Moments()
    for start in range(0, len(x), 997):
        batch = x[start:start + 997]
        total.add(len(batch), batch.mean(0), ((batch - batch.mean(0)) ** 2).sum(0))
    np.testing.assert_allclose(total.mean, x.mean(0), rtol=1e-14)
    np.testing.assert_allclose(total.variance, x.var(0), rtol=1e-7)


def test_rows_written_to_a_file_read_back_exactly(monkeypatch):
    monkeypatch.setattr(streamed_rows, "IN_MEMORY_BYTES", 0)
    values = np.random.default_rng(0).normal(size=(37, 4)).astype(np.float32)
    with streamed_rows.MappedRows(37, (4,), np.dtype(np.float32)) as rows:
        assert rows.file is not None and rows.array is None
        for start in range(0, 37, 10):
            rows.write(start, values[start:start + 10])
        np.testing.assert_array_equal(rows.read(0, 37), values)
        np.testing.assert_array_equal(rows.read(15, 22), values[15:22])


# -- the statistics a plain `fit` leaves ----------------------------------------------------


@pytest.fixture(scope="module")
def shifted_figure1():
    """The Figure 1 density moved far from 0 (its columns' means 12 and 10, their
    standard deviations 4.8 and 4): initial statistics (0, 1) would be tens of nats off."""
    splits = km.data.load_figure1(n_train=3000, n_val=10, n_test=2000, seed=0)
    return splits.x_train + np.float32(10.0), splits.x_test + np.float32(10.0)


def _exact_gap(model, x_train, x_test):
    """``log_prob`` after fit, less that after the paper's exact statistics pass (nats)."""
    after_fit = float(np.mean(model.log_prob(x_test)))
    model.set_batch_norm_statistics(x_train)
    return after_fit - float(np.mean(model.log_prob(x_test)))


@pytest.mark.parametrize("form", ["arrays", "tf.data"])
@pytest.mark.parametrize("family", ["MAF", "MAFMoG", "RealNVP", "NSF"])
def test_a_plain_fit_leaves_densities_within_half_a_nat_of_the_exact_pass(family, form, shifted_figure1):
    import tensorflow as tf

    x_train, x_test = shifted_figure1
    model = getattr(km, family)(2, hidden_units=[64, 64], num_layers=5, seed=1)
    model.compile(optimizer=FusedAdam(1e-3))
    if form == "arrays":
        model.fit(x_train, batch_size=100, epochs=5, verbose=0)
    else:
        model.fit(tf.data.Dataset.from_tensor_slices(x_train).shuffle(3000, seed=0).batch(100), epochs=5, verbose=0)
    evaluated = -model.evaluate(x_test, batch_size=500, verbose=0)
    np.testing.assert_allclose(evaluated, np.mean(model.log_prob(x_test)), rtol=1e-5)
    assert abs(_exact_gap(model, x_train, x_test)) < 0.5


@pytest.mark.parametrize("family", ["MAF", "RealNVP"])
def test_a_train_on_batch_loop_leaves_densities_within_half_a_nat_of_the_exact_pass(family, shifted_figure1):
    # Keras' own custom loop has no epochs and no callbacks: each call stores the moments.
    x_train, x_test = shifted_figure1
    model = getattr(km, family)(2, hidden_units=[64, 64], num_layers=5, seed=1)
    model.compile(optimizer=FusedAdam(1e-3))
    for _ in range(5):
        for start in range(0, len(x_train) - 99, 100):
            model.train_on_batch(x_train[start:start + 100])
    loss = model.test_on_batch(x_test)
    np.testing.assert_allclose(-loss, np.mean(model.log_prob(x_test)), rtol=1e-5)
    assert abs(_exact_gap(model, x_train, x_test)) < 0.5
    # One row would be normalised by its own variance (0), as fit refuses it.
    with pytest.raises(ValueError, match="train_on_batch got one row"):
        model.train_on_batch(x_train[:1])
    # A fit in between starts the moments again; the calls after it go on storing them.
    model.fit(x_train, batch_size=100, epochs=1, verbose=0)
    model.train_on_batch(x_train[:100])
    assert abs(_exact_gap(model, x_train, x_test)) < 1.0  # one minibatch's moments


def _conditional_rows(n=600):
    rng = np.random.default_rng(0)
    y = np.eye(2, dtype=np.float32)[rng.integers(0, 2, n)]
    x = (rng.normal(size=(n, 2)) + 20.0 * y).astype(np.float32)
    return x, y


@pytest.mark.parametrize("form", ["(x, y) arrays", "tf.data of (x, y)", "generator"])
def test_every_input_form_sets_the_statistics(form):
    import tensorflow as tf

    x, y = _conditional_rows()
    model = km.MAF(2, hidden_units=[16], num_layers=2, conditional_dims=2, seed=0)
    model.compile(optimizer=FusedAdam(1e-3))
    if form == "(x, y) arrays":
        model.fit(x, y, batch_size=50, epochs=2, verbose=0)
    elif form == "tf.data of (x, y)":
        model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(50), epochs=2, verbose=0)
    else:
        def batches():
            while True:
                for start in range(0, len(x), 50):
                    yield x[start:start + 50], y[start:start + 50]
        model.adapt(x, y)  # a generator cannot be read ahead for the standardisation's statistics
        model.fit(batches(), steps_per_epoch=12, epochs=2, verbose=0)
    stored = [(layer.mean.numpy().copy(), layer.variance.numpy().copy()) for layer in bns.batch_norm_layers(model)]
    after_fit = float(np.mean(model.log_prob(x, y)))
    model.set_batch_norm_statistics(x, y)
    for (mean, variance), layer in zip(stored, bns.batch_norm_layers(model), strict=True):
        # The rows' moments under weights that moved within the epoch: near the pass's.
        np.testing.assert_allclose(mean, layer.mean.numpy(), rtol=0.15, atol=0.3)
        np.testing.assert_allclose(variance, layer.variance.numpy(), rtol=0.3)
    assert abs(after_fit - float(np.mean(model.log_prob(x, y)))) < 0.5


def test_callbacks_see_the_epochs_statistics_and_the_exact_pass_takes_precedence():
    import keras

    x, _ = _conditional_rows()
    model = km.MAF(2, hidden_units=[16], num_layers=2, seed=0)
    model.compile(optimizer=FusedAdam(1e-3))
    seen = []
    user = keras.callbacks.LambdaCallback(
        on_epoch_end=lambda epoch, logs: seen.append(model.norms[0].mean.numpy().copy()))
    callbacks = keras.callbacks.CallbackList([user], add_history=True, model=model)
    given = list(callbacks.callbacks)
    model.fit(x, batch_size=50, epochs=2, verbose=0, callbacks=callbacks)
    assert callbacks.callbacks == given  # the caller's list is left as it was
    # Stored before the user's callback ran (as early stopping and checkpoints need).
    np.testing.assert_array_equal(seen[-1], model.norms[0].mean.numpy())
    assert not np.allclose(seen[-1], 0.0)

    # With the paper's callback, the statistics are its exact pass over x, untouched after.
    model.fit(x, batch_size=50, epochs=1, verbose=0, callbacks=[km.training.BatchNormStatistics(x)])
    stored = [layer.mean.numpy().copy() for layer in bns.batch_norm_layers(model)]
    model.set_batch_norm_statistics(x)
    for mean, layer in zip(stored, bns.batch_norm_layers(model), strict=True):
        np.testing.assert_array_equal(mean, layer.mean.numpy())


def test_a_fit_with_the_paper_pass_traces_a_step_without_the_epoch_moments():

    x, _ = _conditional_rows()
    model = km.MAF(2, hidden_units=[16], num_layers=2, seed=0)
    model.compile(optimizer=FusedAdam(1e-3))
    model.fit(x, batch_size=50, epochs=1, verbose=0, callbacks=[bns.BatchNormStatistics(x)])
    assert not any(layer.store_epoch_moments() for layer in bns.batch_norm_layers(model))  # none kept
    paper_step = model.train_function
    model.fit(x, batch_size=50, epochs=1, verbose=0)  # EpochStatistics: a step that keeps them
    assert model.train_function is not paper_step
    assert all(layer.store_epoch_moments() for layer in bns.batch_norm_layers(model))
    model.fit(x, batch_size=50, epochs=1, verbose=0, callbacks=[bns.BatchNormStatistics(x)])
    assert model.train_function is paper_step  # each step is made once
    model.compile(optimizer=FusedAdam(1e-3))  # a new compile: new steps
    model.fit(x, batch_size=50, epochs=1, verbose=0, callbacks=[bns.BatchNormStatistics(x)])
    assert model.train_function is not paper_step


@pytest.mark.parametrize("regime", ["one call", "in parts", "no batch norm"])
@pytest.mark.parametrize("conditional", [False, True], ids=["unconditional", "conditional"])
def test_the_validation_with_the_statistics_is_the_pass_then_log_prob(regime, conditional, monkeypatch):
    if regime == "in parts":
        monkeypatch.setattr(bns, "rows_per_call", lambda width: 100)
    x, y = _conditional_rows()
    y = y if conditional else None
    family = km.MADE if regime == "no batch norm" else km.MAF
    kwargs = {"conditional_dims": 2} if conditional else {}
    model, reference = (family(2, hidden_units=[16], seed=0, **kwargs) for _ in range(2))
    reference.set_weights(model.get_weights())
    x_val, y_val = x[:70] + np.float32(0.5), None if y is None else y[:70]

    loss = bns.validation_loss_with_statistics(model, x, y, x_val, y_val)
    reference.set_batch_norm_statistics(x, y)
    for a, b in zip(model.get_weights(), reference.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)  # the statistics are the pass's
    np.testing.assert_allclose(loss, -np.mean(reference.log_prob(x_val, y_val)), rtol=1e-6)
    with pytest.raises(ValueError, match="conditional"):  # y_val missing, or given to an unconditional model
        bns.validation_loss_with_statistics(model, x, y, x_val, None if conditional else x_val)


def test_the_validation_callback_refuses_missing_side_information_before_training():

    x, y = _conditional_rows()
    model = km.MAF(2, hidden_units=[16], num_layers=2, conditional_dims=2, seed=0)
    model.compile(optimizer=FusedAdam(1e-3))
    before = [w.numpy().copy() for w in model.trainable_weights]
    for callback, missing in ((bns.ValidationWithStatistics(x, y, x[:50]), "pass y_val"),
                              (bns.ValidationWithStatistics(x, None, x[:50], y[:50]), "pass y_train")):
        with pytest.raises(ValueError, match=missing):
            model.fit(x, y, batch_size=50, epochs=1, verbose=0, callbacks=[callback])
    for a, b in zip(before, model.trainable_weights, strict=True):
        np.testing.assert_array_equal(a, b.numpy())  # refused before any step
