"""DensityModel: a Keras 3 model whose output is log p(x) or log p(x | y)."""

from __future__ import annotations

import functools
import inspect
import operator

import keras
import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

from tfp_maf import ExpGammaBatchNorm, ExpGammaBatchNormalization, apply_masks, flow_kwargs
from tfp_maf._graph_memory import custom_gradients_released, traced_on_purpose
from tfp_maf.sampling import without_gradients

tfd = tfp.distributions

__all__ = ["DensityModel", "unpack"]


def _halves(x, y):
    """``(x, y)`` split in two along the batch axis: ``[(x_1, y_1), (x_2, y_2)]``."""
    rows = tf.shape(x)[0]
    sizes = tf.stack([rows // 2, rows - rows // 2])
    xs = tf.split(x, sizes, axis=0)
    ys = [None, None] if y is None else tf.split(y, sizes, axis=0)
    return list(zip(xs, ys, strict=True))


def unpack(data):
    """What Keras hands a step -> ``(x, y, sample_weight)``.

    Every form Keras users write: ``x``; ``(x,)``; ``(x, y)`` (``fit(x, y)``, a dataset
    of pairs); ``(x, y, sample_weight)``; and ``((x, y),)``, which ``fit((x, y))``
    yields, the form ``model((x, y))`` takes.
    """
    x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
    if y is None and isinstance(x, (tuple, list)):
        if len(x) == 1:
            x = x[0]
        elif len(x) == 2:
            x, y = x
        else:
            raise ValueError(f"expected x or (x, y), got a tuple of {len(x)}.")
    return x, y, sample_weight


def _weighted_mean(values, sample_weight):
    """The mean of ``values``, weighted by ``sample_weight`` when given."""
    if sample_weight is None:
        return tf.reduce_mean(values)
    weights = tf.cast(tf.reshape(sample_weight, tf.shape(values)), values.dtype)
    return tf.reduce_sum(values * weights) / tf.reduce_sum(weights)


def _check_count(n, owner: str):
    """``n`` for ``sample(n)``: a Python or NumPy integer >= 0, or an integer tensor."""
    if isinstance(n, (tf.Tensor, tf.Variable)) and n.dtype.is_integer:
        return n
    try:
        count = operator.index(n)
    except TypeError:
        raise ValueError(f"{owner}: sample(n) needs an integer n >= 0, got n={n!r}.") from None
    if count < 0:
        raise ValueError(f"{owner}: sample(n) needs an integer n >= 0, got n={count}.")
    return count


class DensityModel(keras.Model):
    """Base of every model in the zoo: the model owns the weights, and
    `distribution` builds a fresh TFP distribution from them on demand.

    * ``model(x)`` / ``model((x, y))`` and ``model.log_prob(x, y)`` give the
      log-density per example.
    * ``fit`` / ``evaluate`` report the mean negative log-likelihood as
      ``loss`` (a `keras.metrics.Mean`, reset every epoch). Regularization
      losses (the paper's L2 penalty) are added to the gradient, not to the
      reported number, so ``loss`` is comparable to a test log-likelihood.
    * ``distribution(y=None, training=False)``: the TFP distribution p(x) or
      p(x | y), with ``y`` and ``training`` bound (`tfp_maf.bind_kwargs`), so
      that ``log_prob(x)`` and ``sample(n)`` on it take no keywords.
    * ``sample(n, y=None, seed=None)``.
    * ``export(path)``: a SavedModel serving ``serve`` (the call), ``log_prob``
      and ``sample`` (`keras_models.export`).

    The dtype policy is float32 (the default) or float64: every layer, the base
    density and the sampler run in it. Mixed and 16-bit policies are refused
    (see `_check_policy`).

    Subclasses implement `_distribution(y, training)`, with ``y`` checked.
    """

    def __init__(self, event_size: int, conditional_dims: int | None = None, **kwargs):
        super().__init__(**kwargs)
        if int(event_size) < 1:
            raise ValueError(f"event_size must be >= 1, got {event_size}.")
        _check_policy(self.dtype_policy, self.name)
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
        return self._distribution(self._check_y(y), training)

    def _distribution(self, y, training) -> tfd.Distribution:
        raise NotImplementedError

    def fit_in_closed_form(self, x, y=None) -> bool:
        """Fits the maximum-likelihood weights directly, where a model has them in closed
        form (`keras_models.zoo.Gaussian`), and says whether it did. `fit_as_paper` asks
        this before gradient training."""
        return False

    # -- density ---------------------------------------------------------------

    def _check(self, x, y):
        x = tf.convert_to_tensor(x)
        if not x.dtype.is_floating:
            raise TypeError(f"{self.name}: expected floating-point x, got {x.dtype.name}.")
        x = tf.cast(x, self.compute_dtype)
        if x.shape.rank is not None and (x.shape.rank == 0 or x.shape[-1] != self.event_size):
            raise ValueError(
                f"{self.name}: expected x with {self.event_size} columns, got shape "
                f"{x.shape.as_list()}."
            )
        return x, self._check_y(y)

    def _check_y(self, y):
        """``y`` cast to the model's dtype; errors name what was expected."""
        if self.conditional_dims is None:
            if y is not None:
                raise ValueError(f"{self.name} is unconditional, but y was given.")
            return None
        if y is None:
            raise ValueError(
                f"{self.name} is conditional on y with {self.conditional_dims} columns: "
                "pass (x, y)."
            )
        y = tf.cast(tf.convert_to_tensor(y), self.compute_dtype)
        if y.shape.rank is not None and (y.shape.rank == 0 or y.shape[-1] != self.conditional_dims):
            raise ValueError(
                f"{self.name}: expected y with {self.conditional_dims} columns, got shape "
                f"{y.shape.as_list()}."
            )
        return y

    #: Evaluation-mode batches of at least this many rows (in a graph) run as two
    #: independent halves. The halves' ops do not depend on each other, so TF's
    #: executor overlaps one half's small ops (the thin first and last matmuls of each
    #: MADE, the elementwise tails) with the other's large matmuls; on a 2-core CPU that
    #: made config A of ``benchmarks/speed.py`` about 10% faster. Batches are never
    #: split in training mode, where batch norm reads the whole batch's statistics.
    split_log_prob_rows = 4096

    def log_prob(self, x, y=None, training: bool = False) -> tf.Tensor:
        x, y = self._check(x, y)
        if training:
            return self._log_prob(x, y, True)
        halves = self._splits(x, y)
        if tf.executing_eagerly():
            # One traced program per model for every batch size: an eager TFP call costs
            # tens of milliseconds in Python, whatever the batch.
            fn = functools.partial(self._evaluation_log_prob, halves=halves)
            return self._traced(f"log_prob, in halves: {halves}", y, fn)(x, y)
        return self._evaluation_log_prob(x, y, halves)

    def _log_prob(self, x, y, training):
        return self._distribution(y, training).log_prob(x)

    def _evaluation_log_prob(self, x, y, halves: bool):
        return self._in_halves(x, y) if halves else self._log_prob(x, y, False)

    def _splits(self, x, y) -> bool:
        """Whether evaluation-mode `log_prob` splits this batch in halves: ``x`` of
        static shape ``[N, D]`` with ``N >= split_log_prob_rows``, and ``y`` (if any)
        ``[N, K]``."""
        rows = x.shape[0] if x.shape.rank == 2 else None
        if rows is None or (y is not None and (y.shape.rank != 2 or y.shape[0] != rows)):
            return False
        return rows >= self.split_log_prob_rows

    def _in_halves(self, x, y):
        return tf.concat([self._log_prob(*half, False) for half in _halves(x, y)], axis=0)

    def _traced(self, name: str, y, fn):
        """``fn`` as a `tf.function` of this model, one per ``name`` and rank of ``y`` (a
        relaxed rank would leave the layers' widths unknown). Its batch dimension relaxes
        to None on the second size: at most two traces each."""
        cache = self.__dict__.setdefault("_traced_calls", {})  # not a Keras-tracked attribute
        key = (name, None if y is None else y.shape.rank)
        if key not in cache:
            cache[key] = traced_on_purpose(fn, reduce_retracing=True)
        return cache[key]

    def call(self, inputs, training=False):
        x, y, _ = unpack(inputs)
        return self.log_prob(x, y, training=bool(training))

    def sample(self, n: int, y=None, seed=None) -> tf.Tensor:
        """``[n, D]`` samples.

        For a conditional model ``y`` is one row ``[K]`` (every sample given it) or
        ``[n, K]`` (one row per sample). ``seed``: an int or two int32s; either gives
        the same samples on every call (an int ``s`` is the stateless seed ``(0, s)``).
        """
        n = _check_count(n, self.name)
        if isinstance(seed, int):  # TFP would read an int as a stateful op seed
            seed = [0, seed]
        if seed is not None:  # a stateless seed: two int32s
            seed = tf.cast(seed, tf.int32)
        y = self._check_y(y)
        if y is not None and y.shape.rank == 2:
            rows = y.shape[0]
            if rows is not None and isinstance(n, int) and rows != n:
                raise ValueError(
                    f"{self.name}: sample(n={n}) needs y of shape [{self.conditional_dims}] or "
                    f"[{n}, {self.conditional_dims}], got shape {y.shape.as_list()}."
                )
        elif y is not None and y.shape.rank != 1:
            raise ValueError(
                f"{self.name}: sample(n) needs y of shape [{self.conditional_dims}] or "
                f"[n, {self.conditional_dims}], got shape {y.shape.as_list()}."
            )
        if tf.executing_eagerly():  # one traced program per model for every n (see log_prob)
            n = tf.cast(n, tf.int32)
            return self._traced(f"sample, seed {seed is not None}", y, self._draw)(n, y, seed)
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
        """Keras' export, with this model's endpoints (`keras_models.export`).

        ``serve`` is the call (log p per row; ``serve((x, y))`` for a conditional
        model), and ``log_prob`` and ``sample`` are served beside it. Other formats go
        to Keras.
        """
        if format != "tf_saved_model":
            return super().export(filepath, format=format, verbose=verbose,
                                  input_signature=input_signature, **kwargs)
        from keras_models.export import export_saved_model

        export_saved_model(self, filepath, verbose=bool(verbose), input_signature=input_signature)

    def set_weights(self, weights):
        super().set_weights(weights)
        apply_masks(self)  # MADE kernels hold zeros outside their masks (`tfp_maf.MaskedDense`)

    # -- training --------------------------------------------------------------

    def fit(self, *args, **kwargs):
        self._check_whole_executions(super().fit, args, kwargs, ("steps_per_epoch", "validation_steps"))
        return super().fit(*args, **kwargs)

    def evaluate(self, *args, **kwargs):
        self._check_whole_executions(super().evaluate, args, kwargs, ("steps",))
        return super().evaluate(*args, **kwargs)

    def predict(self, *args, **kwargs):
        self._check_whole_executions(super().predict, args, kwargs, ("steps",))
        return super().predict(*args, **kwargs)

    def _check_whole_executions(self, method, args, kwargs, names) -> None:
        """Step counts must be whole multiples of ``steps_per_execution``.

        Keras 3 runs its compiled loop ``steps_per_execution`` steps per call and
        counts only whole calls: on a repeated dataset, ``fit(steps_per_epoch=25)``
        with 10 steps per call trains 30 steps, ``evaluate(steps=3)`` averages 10
        batches and ``predict(steps=3)`` returns 10 (seen with Keras 3.15).
        `training.compile_as_paper` uses 10, so such a count is an error here
        rather than silently more work than was asked.
        """
        per_call = int(getattr(self, "steps_per_execution", 1) or 1)
        if per_call == 1:
            return
        given = inspect.signature(method).bind_partial(*args, **kwargs).arguments
        for name in names:
            steps = given.get(name)
            if steps is not None and steps > 0 and steps % per_call:
                raise ValueError(
                    f"{self.name}: {name}={steps} is not a multiple of steps_per_execution="
                    f"{per_call}; Keras would run {-(-steps // per_call) * per_call} steps. Pass a "
                    f"multiple of {per_call}, or compile with steps_per_execution=1 "
                    "(`compile_as_paper(model, name, steps_per_execution=1)`)."
                )

    @property
    def metrics(self):
        return [self.loss_tracker]

    def train_step(self, data):
        with custom_gradients_released():  # else the trace outlives the model
            return self._train_step(data)

    def _train_step(self, data):
        x, y, sample_weight = unpack(data)
        with tf.GradientTape() as tape:
            nll = -_weighted_mean(self.log_prob(x, y, training=True), sample_weight)
            penalty = tf.add_n(self.losses) if self.losses else 0.0
            total = nll + tf.cast(penalty, nll.dtype)
            # Under tf.distribute each replica sees 1/R of the global batch and the
            # optimizer sums the replicas' gradients: scale so the sum is the mean.
            total = total / tf.distribute.get_strategy().num_replicas_in_sync
        variables = self.trainable_variables
        if variables:
            self.optimizer.apply(tape.gradient(total, variables), variables)
        self.loss_tracker.update_state(nll)
        return self._logs()

    def test_step(self, data):
        x, y, sample_weight = unpack(data)
        self.loss_tracker.update_state(-_weighted_mean(self.log_prob(x, y, training=False), sample_weight))
        return self._logs()

    def predict_step(self, data):
        x, y, _ = unpack(data)  # Keras' own would read (x, y) as features and targets
        return self.log_prob(x, y, training=False)

    def _logs(self) -> dict:
        loss = self.loss_tracker.result()
        if isinstance(tf.distribute.get_strategy(), tf.distribute.MultiWorkerMirroredStrategy):
            # Keras 3 averages each worker's logs with strategy.reduce("MEAN", axis=0),
            # which rejects scalars (seen with Keras 3.15): give it a vector of one.
            loss = tf.reshape(loss, [1])
        return {"loss": loss}

    # -- batch norm --------------------------------------------------------------

    def batch_norm_layers(self) -> list[ExpGammaBatchNormalization]:
        return [layer for layer in self._flatten_layers() if isinstance(layer, ExpGammaBatchNormalization)]

    def set_batch_norm_statistics(self, x, y=None, batch_size: int = 10_000) -> None:
        """Sets every batch norm's statistics to those of the whole training set.

        The paper's evaluation-time statistics: the training data is mapped
        towards the noise, in evaluation mode, and each batch norm gets the
        mean and variance of what reaches it.
        """
        if not self.batch_norm_layers():
            return
        x = np.asarray(x)
        dist = self._distribution(self._check_y(None if y is None else y[:1]), training=False)
        chunks = range(0, len(x), batch_size)
        current = [tf.cast(x[i : i + batch_size], self.compute_dtype) for i in chunks]
        ys = [None if y is None else tf.cast(y[i : i + batch_size], self.compute_dtype) for i in chunks]
        bijectors = list(dist.bijector.bijectors)  # data side first
        last_norm = max(i for i, b in enumerate(bijectors) if isinstance(b, ExpGammaBatchNorm))
        # Nothing past the last batch norm needs the training data mapped through it.
        step = self._inverse_step(last_norm)
        for index, b in enumerate(bijectors[: last_norm + 1]):
            if isinstance(b, ExpGammaBatchNorm):
                values = np.concatenate([c.numpy() for c in current]).astype(np.float64)
                self._batch_norm_by_name[b.name].set_statistics(values.mean(0), values.var(0))
                if index == last_norm:
                    return
            current = [step(c, yy, tf.constant(index)) for c, yy in zip(current, ys, strict=True)]

    def _inverse_step(self, last: int):
        """``step(x, y, index)``: the inverse of the ``index``-th bijector of the chain
        (``index < last``), as ONE cached graph function that switches on ``index``: it
        reads the layers' variables when it runs, so statistics set in between are seen,
        and it is traced once for all the bijectors (one function per bijector would be
        a dozen traces, each a retracing warning from TF)."""
        def step(c, yy, index):
            dist = self._distribution(None if yy is None else yy[:1], training=False)
            def inverse(b):
                return lambda: b.inverse(c, **flow_kwargs(b, conditional_input=yy))

            return tf.switch_case(index, [inverse(b) for b in dist.bijector.bijectors[:last]])

        # y, when given, is always [N, K]: one function whatever it is.
        return self._traced(f"inverse step to {last}", None, step)

    @property
    def _batch_norm_by_name(self) -> dict:
        return {layer.name: layer for layer in self.batch_norm_layers()}

    def get_config(self):
        config = super().get_config()
        config.update(event_size=self.event_size, conditional_dims=self.conditional_dims)
        return config


def _check_policy(policy, owner: str) -> None:
    """Refuses dtype policies other than float32 and float64, saying why.

    Wholly 16-bit policies: a log-density sums D log-scales and log-determinants and
    exponentiates the log-scales, which bfloat16's 8-bit mantissa resolves to about 1%
    (8 nats of MNIST's -1300) and float16 overflows past e^11. Mixed policies need the
    matmuls in 16 bits and the affine maps, log-dets, base density and loss in float32;
    ``benchmarks/mixed_precision.py`` does that split by hand for a MAF and reaches
    float32's likelihood on the Figure 1 density, 1.4x slower on CPU. The models,
    their batch norms and the sampler do not do that split, so the policy is refused
    rather than run in a precision nobody tested.
    """
    compute, variable = policy.compute_dtype, policy.variable_dtype
    if compute == variable and compute in ("float32", "float64"):
        return
    why = (
        "mixed policies need the matmuls in 16 bits and the log-densities in float32, a "
        "split tfp-maf's models do not make"
        if compute != variable
        else "log-densities sum D log-scales and exponentiate them, which 16-bit floats "
        "cannot hold to useful precision"
    )
    raise ValueError(
        f"{owner}: tfp-maf models run in float32 or float64, but the dtype policy is "
        f"{policy.name!r} (compute {compute}, variables {variable}): {why}. Pass "
        "dtype='float32' (or 'float64') to the model, or "
        "keras.mixed_precision.set_global_policy('float32')."
    )
