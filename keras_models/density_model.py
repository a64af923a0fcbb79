"""DensityModel: a Keras 3 model whose output is log p(x) or log p(x | y)."""

from __future__ import annotations

import keras
import tensorflow as tf
import tensorflow_probability as tfp

from keras_models import _checks
from keras_models._checks import unpack
from keras_models.batch_norm_statistics import set_batch_norm_statistics
from tfp_maf import apply_masks
from tfp_maf._graph_memory import (
    custom_gradients_released,
    mark_traced_on_purpose,
    traced_on_purpose,
)
from tfp_maf.layers import kernels_as_stored, mask_gradients
from tfp_maf.sampling import without_gradients

tfd = tfp.distributions

__all__ = ["DensityModel", "unpack"]


class DensityModel(keras.Model):
    """Base of every model in the zoo: the model owns the weights, and
    `distribution` builds a fresh TFP distribution from them on demand.

    ``model(x)`` / ``model((x, y))`` and ``log_prob(x, y)`` give log p per example;
    ``fit`` / ``evaluate`` report the mean negative log-likelihood as ``loss`` (the
    paper's L2 penalty goes into the gradient, not the reported number, so ``loss``
    compares with a test log-likelihood); ``distribution(y)`` is the TFP distribution
    with ``y`` bound; ``sample(n, y)``; ``export(path)`` serves ``serve``, ``log_prob``
    and ``sample``. The dtype policy is float32 or float64 (`_checks.check_policy`).

    Subclasses implement `_distribution(y, training)`, with ``y`` checked.
    """

    def __init__(self, event_size: int, conditional_dims: int | None = None, **kwargs):
        super().__init__(**kwargs)
        if int(event_size) < 1:
            raise ValueError(f"event_size must be >= 1, got {event_size}.")
        _checks.check_policy(self.dtype_policy, self.name)
        self.event_size = int(event_size)
        self.conditional_dims = None if conditional_dims is None else int(conditional_dims)
        self.loss_tracker = keras.metrics.Mean(name="loss", dtype=self.dtype_policy.variable_dtype)
        # Every layer creates its weights in __init__: nothing is built lazily.
        self.built = True

    def distribution(self, y=None, training: bool = False) -> tfd.Distribution:
        """p(x), or p(x | y) for a conditional model, with ``y`` and ``training`` bound.

        ``y``: ``[K]`` or ``batch + [K]`` (NumPy or tensor); the distribution has its
        batch shape, so ``sample()`` draws one x per row of ``y`` and ``sample(n)``
        gives ``[n, *batch, D]``. ``training=True``: batch norms use the statistics of
        the batch they see (as in training), else the stored ones.
        """
        return self._distribution(_checks.check_y(self, y, "call distribution(y)"), training)

    def _distribution(self, y, training) -> tfd.Distribution:
        raise NotImplementedError

    def fit_in_closed_form(self, x, y=None) -> bool:
        """Fits the maximum-likelihood weights directly, where a model has them in closed
        form (`keras_models.zoo.Gaussian`), and says whether it did. `fit_as_paper` asks
        this before gradient training."""
        return False

    # -- density ---------------------------------------------------------------

    def log_prob(self, x, y=None, training: bool = False) -> tf.Tensor:
        x, y = _checks.check_x(self, x), _checks.check_y(self, y, "call log_prob(x, y)")
        if tf.executing_eagerly() and not training:
            # One traced program per model for every batch size: an eager TFP call costs
            # tens of milliseconds in Python, whatever the batch.
            return self._traced("log_prob", y, lambda x, y: self._distribution(y, False).log_prob(x))(x, y)
        return self._distribution(y, training).log_prob(x)

    def _traced(self, name: str, y, fn):
        """``fn`` as a `tf.function` of this model, one per ``name`` and rank of ``y`` (a
        relaxed rank would leave the layers' widths unknown). Its batch dimension relaxes
        to None on the second size: at most two traces each."""
        cache = self.__dict__.setdefault("_traced_calls", {})  # not a Keras-tracked attribute
        key = (name, None if y is None else y.shape.rank)
        if key not in cache:
            # Not converted by AutoGraph: nothing in it branches on tensors, and AutoGraph
            # could not parse the source of log_prob's lambda (it warned, in `reproduce`).
            cache[key] = traced_on_purpose(tf.autograph.experimental.do_not_convert(fn), reduce_retracing=True)
        return cache[key]

    def call(self, inputs, training=False):
        x, y, _ = unpack(inputs)
        return self.log_prob(x, _checks.check_y(self, y), training=bool(training))

    def sample(self, n: int, y=None, seed=None) -> tf.Tensor:
        """``[n, D]`` samples.

        For a conditional model ``y`` is one row ``[K]`` or ``[1, K]`` (every sample
        given it) or ``[n, K]`` (one row per sample). ``seed``: an int or two int32s;
        either gives the same samples on every call (an int ``s`` is the stateless seed
        ``(0, s)``).
        """
        n = _checks.check_count(n, self.name)
        if isinstance(seed, int):  # TFP would read an int as a stateful op seed
            seed = [0, seed]
        if seed is not None:  # a stateless seed: two int32s
            seed = tf.cast(seed, tf.int32)
        y = _checks.check_sample_y(self, n, y)
        if tf.executing_eagerly():  # one traced program per model for every n (see log_prob)
            return self._traced(f"sample, seed {seed is not None}", y, self._draw)(tf.cast(n, tf.int32), y, seed)
        return self._draw(n, y, seed)

    def _draw(self, n, y, seed):
        # Values only: no gradient machinery kept per trace (`tfp_maf.sampling.without_gradients`);
        # model.distribution().sample() under a tape is the differentiable path.
        with without_gradients():
            dist = self._distribution(y, False)
            if y is not None and y.shape.rank == 2:
                return dist.sample(seed=seed)  # one x per row of y
            return dist.sample(n, seed=seed)

    def export(self, filepath, format="tf_saved_model", verbose=None, input_signature=None, **kwargs):
        """Keras' export, with this model's endpoints (`keras_models.export`): ``serve``
        is the call (log p per row; ``serve((x, y))`` for a conditional model), and
        ``log_prob`` and ``sample`` are served beside it. Other formats go to Keras."""
        if format != "tf_saved_model":
            return super().export(filepath, format=format, verbose=verbose,
                                  input_signature=input_signature, **kwargs)
        from keras_models.export import export_saved_model

        export_saved_model(self, filepath, verbose=bool(verbose), input_signature=input_signature)

    def set_weights(self, weights):
        super().set_weights(weights)
        apply_masks(self)  # MADE kernels hold zeros outside their masks (`tfp_maf.MaskedDense`)

    def set_batch_norm_statistics(self, x, y=None, batch_size: int = 10_000) -> None:
        """Every batch norm's statistics from the whole training set (the paper's
        evaluation-time statistics; `keras_models.batch_norm_statistics`)."""
        set_batch_norm_statistics(self, x, y, batch_size)

    # -- training --------------------------------------------------------------

    def fit(self, *args, **kwargs):
        kwargs = _checks.dataset_shuffle(super().fit, args, kwargs)
        return self._checked_call(super().fit, args, kwargs, ("steps_per_epoch", "validation_steps"))

    def evaluate(self, *args, **kwargs):
        return self._checked_call(super().evaluate, args, kwargs, ("steps",))

    def predict(self, *args, **kwargs):
        return self._checked_call(super().predict, args, kwargs, ("steps",))

    def _checked_call(self, method, args, kwargs, step_counts):
        """Keras' ``method`` after the checks of `keras_models._checks`, with floatx the
        model's dtype: Keras casts float arrays to floatx, which a float64 model must not see."""
        _checks.check_whole_executions(self, method, args, kwargs, step_counts)
        _checks.check_data(self, method, args, kwargs)
        with _checks.floatx_of(self):
            return method(*args, **kwargs)

    # Keras makes these per model from the same code; TF would count every model's
    # trace as a retrace of one function and warn from the fifth (`mark_traced_on_purpose`).
    def make_train_function(self, force=False):
        # Keras builds the optimizer inside the first trace of the step. A first trace
        # that fails (a bad input) would leave its variables to the next trace, and TF
        # refuses variables created on a non-first call: every later fit would fail.
        if self.optimizer is not None and not self.optimizer.built:
            self.optimizer.build(self.trainable_variables)
        super().make_train_function(force)
        mark_traced_on_purpose(self.train_function)
        return self.train_function

    def make_test_function(self, force=False):
        super().make_test_function(force)
        mark_traced_on_purpose(self.test_function)
        return self.test_function

    def make_predict_function(self, force=False):
        super().make_predict_function(force)
        mark_traced_on_purpose(self.predict_function)
        return self.predict_function

    @property
    def metrics(self):
        return [self.loss_tracker]

    def train_step(self, data):
        # custom_gradients_released: else the trace outlives the model. kernels_as_stored:
        # the MADEs' kernels are read as stored and their gradients masked below, where XLA
        # fuses the mask into the optimizer's update.
        with custom_gradients_released(), kernels_as_stored():
            x, y, sample_weight = unpack(data)
            with tf.GradientTape() as tape:
                nll = -_weighted_mean(self.log_prob(x, y, training=True), sample_weight)
                penalty = tf.add_n(self.losses) if self.losses else 0.0
                # Under tf.distribute each replica sees 1/R of the global batch and the
                # optimizer sums the replicas' gradients: scale so the sum is the mean.
                total = (nll + tf.cast(penalty, nll.dtype)) / tf.distribute.get_strategy().num_replicas_in_sync
            variables = self.trainable_variables
            if variables:
                self.optimizer.apply(mask_gradients(self, tape.gradient(total, variables), variables), variables)
            self.loss_tracker.update_state(nll)
            return self._logs()

    def test_step(self, data):
        x, y, sample_weight = unpack(data)
        with kernels_as_stored():  # no gradient is taken: the mask products would be a pass for nothing
            log_prob = self.log_prob(x, y, training=False)
        self.loss_tracker.update_state(-_weighted_mean(log_prob, sample_weight))
        return self._logs()

    def predict_step(self, data):
        x, y, _ = unpack(data)  # Keras' own would read (x, y) as features and targets
        with kernels_as_stored():
            return self.log_prob(x, y, training=False)

    def _logs(self) -> dict:
        loss = self.loss_tracker.result()
        if isinstance(tf.distribute.get_strategy(), tf.distribute.MultiWorkerMirroredStrategy):
            # Keras 3 averages each worker's logs with strategy.reduce("MEAN", axis=0),
            # which rejects scalars (seen with Keras 3.15): give it a vector of one.
            loss = tf.reshape(loss, [1])
        return {"loss": loss}

    def get_config(self):
        config = super().get_config()
        config.update(event_size=self.event_size, conditional_dims=self.conditional_dims)
        return config


def _weighted_mean(values, sample_weight):
    """The mean of ``values``, weighted by ``sample_weight`` when given."""
    if sample_weight is None:
        return tf.reduce_mean(values)
    weights = tf.cast(tf.reshape(sample_weight, tf.shape(values)), values.dtype)
    return tf.reduce_sum(values * weights) / tf.reduce_sum(weights)
