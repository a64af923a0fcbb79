"""`keras_models.optimizers.FusedAdam`: Adam's update, one op per variable; and every
optimizer Keras ships training a flow that stays autoregressive."""

import inspect
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_models
from keras_models.optimizers import FusedAdam
from tfp_maf.layers.gradient_masks import KernelMask

# Keras keeps the step size in a float32 variable, whatever the model's dtype.
LEARNING_RATE = float(np.float32(0.1))


def _numpy_adam(w, grads, lr=LEARNING_RATE, beta_1=0.9, beta_2=0.999, epsilon=1e-7, weight_decay=None):
    """Adam as Keras writes it, in float64 NumPy: the reference."""
    m, v = np.zeros_like(w), np.zeros_like(w)
    for t, g in enumerate(grads, start=1):
        if weight_decay:  # Keras' own decay, which rounds its rate through float32
            w = w - w * float(np.float32(weight_decay)) * lr
        m = m + (g - m) * (1 - beta_1)
        v = v + (g * g - v) * (1 - beta_2)
        alpha = lr * np.sqrt(1 - beta_2**t) / (1 - beta_1**t)
        w = w - m * alpha / (np.sqrt(v) + epsilon)
    return w


GRADIENTS = np.random.default_rng(0).normal(size=(5, 4)) * np.array([1.0, 1e-2, 1e-4, 10.0])


@pytest.mark.parametrize("weight_decay", [None, 0.01])
@pytest.mark.parametrize("mode", ["eager", "graph", "xla"])
def test_matches_the_adam_update_in_float64(mode, weight_decay):
    w0 = np.linspace(-1.0, 1.0, 4)
    w = keras.Variable(w0, dtype="float64")
    adam = FusedAdam(0.1, weight_decay=weight_decay)

    def step(g):
        adam.apply([g], [w])

    if mode != "eager":
        step = tf.function(step, jit_compile=mode == "xla")
    for g in GRADIENTS:
        step(tf.constant(g))
    np.testing.assert_allclose(w.numpy(), _numpy_adam(w0, GRADIENTS, weight_decay=weight_decay), rtol=1e-12)
    assert int(adam.iterations) == len(GRADIENTS)


def test_equals_keras_adam_in_float32_with_a_schedule():
    # Keras rounds beta_1 and beta_2 through float32 in its bias corrections, so the two
    # agree to float32 rounding, not bitwise.
    schedule = keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=2, decay_rate=0.5)
    results = []
    for adam in (FusedAdam(schedule), keras.optimizers.Adam(schedule)):
        w = keras.Variable(np.linspace(-1.0, 1.0, 4, dtype=np.float32))
        for g in GRADIENTS.astype(np.float32):
            adam.apply([tf.constant(g)], [w])
        results.append(w.numpy())
    np.testing.assert_allclose(*results, rtol=1e-5, atol=1e-6)


def test_amsgrad_is_keras_own_update():
    results = []
    for adam in (FusedAdam(0.1, amsgrad=True), keras.optimizers.Adam(0.1, amsgrad=True)):
        w = keras.Variable(np.linspace(-1.0, 1.0, 4, dtype=np.float32))
        for g in GRADIENTS.astype(np.float32):
            adam.apply([tf.constant(g)], [w])
        results.append(w.numpy())
    np.testing.assert_array_equal(*results)


def test_one_op_per_variable_and_the_scalars_once():
    variables = [keras.Variable(np.ones(s, np.float32)) for s in (3, 4, 5)]
    adam = FusedAdam(0.1)
    adam.build(variables)
    graph = tf.function(lambda: adam.apply([tf.ones_like(v) for v in variables], variables)
                        ).get_concrete_function().graph
    types = [op.type for op in graph.get_operations()]
    assert types.count("ResourceApplyAdam") == len(variables)
    assert types.count("Pow") == 2  # beta_1^t and beta_2^t, shared by every variable


def test_same_variables_and_config_as_keras_adam(tmp_path):
    x = np.random.default_rng(0).normal(size=(64, 2)).astype(np.float32)
    model = keras_models.MAF(2, num_layers=1, hidden_units=[8])
    model.compile(optimizer=FusedAdam(1e-3, beta_2=0.99), jit_compile=False)
    model.fit(x, batch_size=32, epochs=1, verbose=0)
    assert isinstance(model.optimizer, keras.optimizers.Adam)
    keras_adam = keras.optimizers.Adam.from_config(model.optimizer.get_config())
    keras_adam.build(model.trainable_variables)
    assert [v.shape for v in keras_adam.variables] == [v.shape for v in model.optimizer.variables]
    # A model saved with FusedAdam loads with it, its moments included.
    path = os.path.join(tmp_path, "maf.keras")
    model.save(path)
    restored = keras.saving.load_model(path)
    assert type(restored.optimizer) is FusedAdam and restored.optimizer.beta_2 == 0.99
    for a, b in zip(model.optimizer.variables, restored.optimizer.variables, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_compile_as_paper_uses_it():
    model = keras_models.training.compile_as_paper(keras_models.MADE(2, hidden_units=[8]), "made")
    assert type(model.optimizer) is FusedAdam


class _NoisySGD(keras.optimizers.SGD):
    """A user's own optimizer: SGD whose update has noise in every entry."""

    def update_step(self, gradient, variable, learning_rate):
        super().update_step(gradient + 1e-3 * tf.random.normal(tf.shape(gradient), dtype=gradient.dtype),
                            variable, learning_rate)


def _keras_optimizers():
    """``{name: optimizer}`` for every optimizer class `keras.optimizers` exports (at
    step size 1e-3), the wrappers wrapping Keras' Muon (the one whose updates are not
    elementwise), and a user's own."""
    wrappers = ("Optimizer", "LossScaleOptimizer", "MultiOptimizer")
    classes = {name: value for name, value in vars(keras.optimizers).items()
               if inspect.isclass(value) and issubclass(value, keras.optimizers.Optimizer) and name not in wrappers}
    # Adafactor's default epsilon_1 underflows in float32 (refused: test below).
    made = {name: cls(learning_rate=1e-3, **({"epsilon_1": 1e-15} if name == "Adafactor" else {}))
            for name, cls in classes.items()}
    made["LossScaleOptimizer(Muon)"] = keras.optimizers.LossScaleOptimizer(keras.optimizers.Muon(1e-3))
    made["user's NoisySGD"] = _NoisySGD(1e-3, name="noisy_sgd")
    return made


OPTIMIZERS = sorted(_keras_optimizers())


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_every_optimizer_keeps_the_flow_autoregressive(name):
    # Muon orthogonalises each 2-D update, filling the masked entries: a flow that kept
    # them zero only through the optimizer's update scored a function that is no density.
    assert "Muon" in OPTIMIZERS and "Lion" in OPTIMIZERS
    rng = np.random.default_rng(0)
    x = rng.normal(size=(600, 4)).astype(np.float32)
    x[:, 1] += x[:, 0] ** 2
    keras.utils.set_random_seed(0)
    model = keras_models.MAF(4, hidden_units=[32, 32], num_layers=2)
    model.compile(optimizer=_keras_optimizers()[name])
    history = model.fit(x, batch_size=100, epochs=3, verbose=0)
    assert np.all(np.isfinite(history.history["loss"])) and len(history.history["loss"]) == 3
    masked = [(v, np.asarray(v.constraint.mask) == 0) for v in model.trainable_variables
              if isinstance(getattr(v, "constraint", None), KernelMask)]
    assert len(masked) == 2 * 3  # each MADE's 2 hidden kernels and its output kernel
    for variable, outside in masked:
        assert np.all(variable.numpy()[outside] == 0), variable.path
    # And so the flow's log-determinant (the diagonal's, as a triangular Jacobian has it)
    # is that of its whole Jacobian, by autodiff: the density is normalised.
    rows = tf.constant(x[:8])
    bijector = model.distribution().bijector
    with tf.GradientTape() as tape:
        tape.watch(rows)
        u = bijector.inverse(rows)
    _, log_det = np.linalg.slogdet(tape.batch_jacobian(u, rows).numpy().astype(np.float64))
    np.testing.assert_allclose(bijector.inverse_log_det_jacobian(rows, event_ndims=1).numpy(), log_det,
                               rtol=1e-5, atol=1e-5)


def test_keras_adafactor_itself_gives_nan_where_a_row_and_a_column_are_zero():
    # Its factored second moment r_i c_j / mean(r), each at least epsilon_1 = 1e-30,
    # underflows in float32 at a zero row and a zero column: 0 / 0. A MADE's masks zero
    # whole columns of its output kernel and a dead ReLU unit zeroes a row.
    gradient = np.ones((4, 3), np.float32)
    gradient[0, :] = gradient[:, 0] = 0.0
    for epsilon_1, finite in ((1e-30, False), (1e-15, True)):
        w = keras.Variable(np.zeros((4, 3), np.float32))
        keras.optimizers.Adafactor(1e-3, epsilon_1=epsilon_1).apply([tf.constant(gradient)], [w])
        assert np.all(np.isfinite(w.numpy())) == finite


def test_fit_refuses_adafactor_where_its_epsilon_underflows():
    model = keras_models.MAF(2, num_layers=1, hidden_units=[8])
    model.compile(optimizer=keras.optimizers.Adafactor(1e-3))
    x = np.random.default_rng(0).normal(size=(64, 2)).astype(np.float32)
    with pytest.raises(ValueError, match=r"Adafactor\(epsilon_1=1e-30\) in float32.*epsilon_1=1e-15 or more"):
        model.fit(x, verbose=0)
    with pytest.raises(ValueError, match="epsilon_1=1e-15 or more"):
        model.train_on_batch(x)
    assert np.all([np.all(w == 0) or np.all(np.isfinite(w)) for w in model.get_weights()])
