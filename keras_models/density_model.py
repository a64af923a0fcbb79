"""DensityModel: a Keras 3 model whose output is log p(x) or log p(x | y)."""

from __future__ import annotations

import inspect

import keras
import tensorflow as tf
import tensorflow_probability as tfp

from keras_models import _checks
from keras_models._checks import unpack
from keras_models.batch_norm_statistics import set_batch_norm_statistics
from keras_models.keras_loop import KerasLoop
from keras_models.model_functions import (
    in_parts,
    model_function,
    noise_in_parts,
    rows_per_call,
    sample_rows_per_call,
    traced_log_prob,
)
from tfp_maf import apply_masks
from tfp_maf.arguments import check_int
from tfp_maf.layers import kernels_as_stored
from tfp_maf.sampling import full_passes, without_gradients

tfd = tfp.distributions

__all__ = ["DensityModel", "keywords", "unpack"]

# A user's `tf.function` converts with AutoGraph every function of ours it calls, unless
# told not to: our code has no tensor-dependent Python control flow, and converting it
# cost about a second of the first trace in a process (as TFP and Keras are exempt).
_no_autograph = tf.autograph.experimental.do_not_convert



class DensityModel(KerasLoop):
    """Base of every model in the zoo: the model owns the weights, and
    `distribution` builds a fresh TFP distribution from them on demand.

    ``model(x)`` / ``model((x, y))`` and ``log_prob(x, y)`` give log p per example;
    ``fit`` / ``evaluate`` report the mean negative log-likelihood as ``loss`` (the
    paper's L2 penalty goes into the gradient, not the reported number, so ``loss``
    compares with a test log-likelihood); ``distribution(y)`` is the TFP distribution
    with ``y`` bound; ``sample(n, y)``; ``export(path)`` serves ``serve``, ``log_prob``
    and ``sample``. The dtype policy is float32 or float64 (`_checks.check_policy`).

    Subclasses implement `_distribution(y, training)`, with ``y`` checked.

    The data a model takes, in ``fit``, ``evaluate``, ``predict`` and a call, is ``x``
    ``[N, D]`` for an unconditional model and ``(x, y)`` with ``y`` ``[N, K]`` for a
    conditional one: arrays (``fit(x)``, ``fit(x, y)``) or a `tf.data.Dataset` that
    yields ``x`` or ``(x, y)`` (`keras_models.data.array_dataset`). ``predict`` gives
    log p per row. No ``loss`` is compiled: the model computes its own.

    Args:
      event_size: ``D``, the number of variables.
      conditional_dims: ``K``, the width of the side information ``y``, or None
        for p(x).
      **kwargs: Keras' model arguments (``name``, ``dtype``: ``"float32"`` or
        ``"float64"``).

    Raises:
      ValueError: if ``event_size < 1`` or the dtype policy is neither float32 nor
        float64 (16-bit and mixed policies are refused). Later calls raise
        ValueError (or TypeError) for an ``x`` or ``y`` of the wrong width or
        kind, or a ``y`` given to an unconditional model or missing for a
        conditional one, naming what was expected.

    Example: a conditional MAF, p(x | y) with ``y`` one of 3 classes, one-hot:

    >>> import keras, numpy as np
    >>> from keras_models import MAF
    >>> rng = np.random.default_rng(0)
    >>> x = rng.standard_normal((48, 2)).astype(np.float32)
    >>> y = np.eye(3, dtype=np.float32)[rng.integers(0, 3, 48)]
    >>> model = MAF(2, num_layers=1, hidden_units=[8], conditional_dims=3)
    >>> model.compile(optimizer=keras.optimizers.Adam(1e-3))
    >>> _ = model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    >>> model((x[:4], y[:4])).shape  # log p(x | y) per row
    TensorShape([4])
    >>> model.sample(5, y=[0., 1., 0.], seed=0).shape  # five draws given class 1
    TensorShape([5, 2])
    >>> model.distribution(y[:4]).batch_shape  # p(x | y) for four rows of y
    TensorShape([4])

    Saved as ``.keras``, it loads as the same model (importing `keras_models`
    registers the classes):

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "maf.keras")
    >>> model.save(path)
    >>> restored = keras.saving.load_model(path)
    >>> bool(np.allclose(restored.log_prob(x, y), model.log_prob(x, y)))
    True
    """

    #: Keywords of a base class's constructor that this model fixes and refuses.
    fixed_keywords: tuple[str, ...] = ()
    #: Keys that earlier releases saved in this model's config and that changed nothing:
    #: dropped, by name, when such a config loads.
    retired_config_keys: tuple[str, ...] = ()

    def __init__(self, event_size: int, conditional_dims: int | None = None, **kwargs):
        unknown = [key for key in kwargs if key not in KERAS_KEYWORDS]
        if unknown:
            raise type(self)._not_taken(unknown[0])
        super().__init__(**kwargs)
        _checks.check_policy(self.dtype_policy, self.name)
        self.event_size = check_int(event_size, "event_size")
        self.conditional_dims = check_int(conditional_dims, "conditional_dims", optional=True)
        self.loss_tracker = keras.metrics.Mean(name="loss", dtype=self.dtype_policy.variable_dtype)
        # Every layer creates its weights in __init__: nothing is built lazily.
        self.built = True

    @_no_autograph
    def distribution(self, y=None, training: bool = False) -> tfd.Distribution:
        """p(x), or p(x | y) for a conditional model, with ``y`` and ``training`` bound.

        A fresh TFP distribution over the model's weights, built at each call (the
        model owns the weights; the distribution is a view of them): use it for
        what the model's own methods do not offer, e.g. gradients of samples under
        a `tf.GradientTape` or ``experimental_sample_and_log_prob``.

        Args:
          y: ``[K]`` or ``batch + [K]`` (NumPy or tensor) for a conditional model;
            the distribution has its batch shape, so ``sample()`` draws one x per
            row of ``y`` and ``sample(n)`` gives ``[n, *batch, D]``. None for an
            unconditional model.
          training: True: batch norms use the statistics of the batch they see (as
            in training), else the stored ones.

        Returns:
          A `tfd.Distribution` with event shape ``[D]``: for the flows a
          `tfd.TransformedDistribution` whose call-time keywords are bound
          (`tfp_maf.bind_kwargs`), for `MADEMoG` a `tfp_maf.MADEMoG`, for the
          `Gaussian` a TFP Gaussian (a mixture over the classes, if conditional).

        Raises:
          ValueError: if ``y`` is missing for a conditional model, given to an
            unconditional one, or of the wrong width.

        Example:

        >>> import numpy as np
        >>> from keras_models import MADE
        >>> model = MADE(2, hidden_units=[8])
        >>> dist = model.distribution()
        >>> x = np.zeros((3, 2), np.float32)
        >>> bool(np.allclose(dist.log_prob(x), model.log_prob(x)))
        True
        >>> dist.event_shape, dist.sample(4, seed=1).shape
        (TensorShape([2]), TensorShape([4, 2]))
        """
        return self._distribution(_checks.check_y(self, y, "call distribution(y)"), training)

    def _distribution(self, y, training) -> tfd.Distribution:
        raise NotImplementedError

    def context(self, y, training: bool = False):
        """The side information as the model's layers read it: ``y`` itself, or its
        embedding by the model's ``context_network`` (the zoo's flows).

        `distribution` applies it; call it when driving the distribution's bijectors
        one by one, with `tfp_maf.flow_kwargs`.

        Args:
          y: ``batch + [K]`` (a tensor, already checked), or None.
          training: passed to the context network.

        Returns:
          ``y``, or a ``batch + [E]`` tensor.
        """
        return y

    def fit_in_closed_form(self, x, y=None) -> bool:
        """Fits the maximum-likelihood weights directly, where a model has them in closed
        form (`keras_models.zoo.Gaussian`), and says whether it did. `fit_as_paper` asks
        this before gradient training.

        Args:
          x: the training data ``[N, D]``.
          y: the training side information ``[N, K]``, or None.

        Returns:
          False here (the flows are trained by gradient); True where a subclass
          fitted the model.
        """
        return False

    # -- density ---------------------------------------------------------------

    @_no_autograph
    def log_prob(self, x, y=None, training: bool = False) -> tf.Tensor:
        """log p(x), or log p(x | y), per row, in nats.

        Eagerly and with ``training=False`` it runs one traced function per model
        (whatever the batch size), so that a call costs the computation, not TFP's
        Python. A batch of more rows than
        `keras_models.model_functions.rows_per_call` (about 2 million values) goes
        through it in parts of that many rows, so that a call's temporary memory stays
        that of a part. ``model(x)`` (``model((x, y))``) gives the same.

        Args:
          x: ``batch + [D]``, floating point (NumPy or tensor); cast to the model's
            dtype.
          y: ``batch + [K]`` for a conditional model (broadcast against ``x``'s
            batch), else None.
          training: True: batch norms normalise with the statistics of this batch,
            as in a training step; False (the default): with the stored ones.

        Returns:
          A tensor of shape ``batch`` in the model's dtype.

        Raises:
          ValueError: if the last axis of ``x`` is not ``D``, or ``y`` is missing,
            unexpected or of the wrong width.
          TypeError: if ``x`` is not floating point, or a dict.

        Example:

        >>> import numpy as np
        >>> from keras_models import MADE
        >>> model = MADE(2, hidden_units=[8])
        >>> x = np.zeros((3, 2), np.float32)
        >>> np.round(model.log_prob(x).numpy(), 4)  # untrained: N(0, I), log p(0) = -log(2 pi)
        array([-1.8379, -1.8379, -1.8379], dtype=float32)
        >>> bool(np.all(model(x).numpy() == model.log_prob(x).numpy()))
        True
        """
        x, y = self._checked(x, y)
        if tf.executing_eagerly() and not training:
            # One traced program per model for every batch size: an eager TFP call costs
            # tens of milliseconds in Python, whatever the batch. A large batch goes
            # through it in parts, as Keras' `predict` does: one call would hold every
            # layer's outputs for every row at once (10,000 MNIST rows through a MAF (5):
            # 350 MiB more), for no more speed. Under tf.config.run_functions_eagerly(True)
            # that program is this method run eagerly: it computes here, or it would call
            # itself without end.
            batch = _checks.batch_shape(self, x, y)
            fn = (self._traced_log_prob if not tf.config.functions_run_eagerly()
                  else lambda x, y: self._log_prob(x, y, False))
            return in_parts(fn, x, y, batch, rows_per_call(self.event_size))
        return self._log_prob(x, y, training)

    def _traced_log_prob(self, x, y):
        """log p(x | y) of checked inputs, with the stored statistics, by the model's
        traced function of it. The test and predict steps call it too: the trace made
        for validation then serves the user's later calls (each trace costs about 0.2 s
        for a MAF (5), 2 cores)."""
        return traced_log_prob(self, x, y)

    def _log_prob(self, x, y, training) -> tf.Tensor:
        """log p(x | y) of checked inputs: the distribution's, or a subclass's faster
        route to the same figures."""
        return self._distribution(y, training).log_prob(x)

    def call(self, inputs, training=False):
        x, y, _ = unpack(inputs)
        return self.log_prob(x, _checks.check_y(self, y), training=bool(training))

    @_no_autograph
    def sample(self, n: int, y=None, seed=None) -> tf.Tensor:
        """``[n, D]`` samples.

        Exact samples, computed without gradients; for differentiable samples use
        ``model.distribution(y).sample(...)`` under a `tf.GradientTape`.

        Args:
          n: the number of samples, an integer >= 0 (Python, NumPy or an integer
            tensor).
          y: for a conditional model, one row ``[K]`` or ``[1, K]`` (every sample
            given it) or ``[n, K]`` (one row per sample); else None.
          seed: None (fresh draws), or an int or two int32s; either gives the same
            samples on every call (an int ``s`` is the stateless seed ``(0, s)``).

        Returns:
          A tensor ``[n, D]`` in the model's dtype.

        Raises:
          ValueError: if ``n`` is not an integer >= 0, or ``y`` is missing,
            unexpected, or of a shape other than ``[K]``, ``[1, K]`` or ``[n, K]``.

        Example:

        >>> import numpy as np
        >>> from keras_models import MADE
        >>> model = MADE(2, hidden_units=[8])
        >>> a, b = model.sample(4, seed=7), model.sample(4, seed=7)
        >>> a.shape, a.dtype, bool(np.all(a.numpy() == b.numpy()))
        (TensorShape([4, 2]), tf.float32, True)
        """
        n = _checks.check_count(n, self.name)
        seed = _checks.check_seed(seed, self.name)
        y = _checks.check_sample_y(self, n, y)
        if not tf.executing_eagerly():
            return self._draw(n, y, seed)
        # One traced program per model for every n (see log_prob). In one call, not in
        # parts: a seeded draw gives what the export's `sample` gives for the same seed.
        draw = model_function(self, f"sample, seed {seed is not None}", y, self._draw)
        return draw(tf.cast(n, tf.int32), y, seed)

    def _draw(self, n, y, seed):
        # Values only: no gradient machinery kept per trace (`tfp_maf.sampling.without_gradients`);
        # model.distribution().sample() under a tape is the differentiable path.
        # kernels_as_stored: no gradient, so no kernel * mask products (and no masks) either.
        with without_gradients(), kernels_as_stored():
            dist = self._distribution(y, False)
            if y is not None and y.shape.rank == 2:
                return dist.sample(seed=seed)  # one x per row of y
            return dist.sample(n, seed=seed)

    @_no_autograph
    def sample_from_noise(self, noise, y=None, gumbel=None) -> tf.Tensor:
        """Samples as a deterministic function of the base noise: ``x = f(noise)``.

        ``noise`` is what the model draws first, standard normal ``[n, D]``; this maps
        it through the flow, so that a caller who draws the noise (a client of the
        ONNX or LiteRT export, `keras_models.portable`) gets exact samples. The graph
        is the one those formats take (`tfp_maf.sampling.full_passes`: D passes of each
        MADE rather than about one), so `sample` is faster where TensorFlow runs.

        Args:
          noise: ``[n, D]``, standard normal draws (NumPy or tensor).
          y: for a conditional model ``[n, K]`` or ``[1, K]``; else None. The
            conditional `Gaussian` reads a one-hot ``y`` (its class).
          gumbel: for the mixtures (`MADEMoG`, `MAFMoG`) only, ``[n, D, C]``
            standard Gumbel draws that pick each variable's component
            (`tfp_maf.MADEMoG.sample_from_noise`); ``C = model.num_components``.

        Returns:
          ``[n, D]`` samples in the model's dtype.

        Raises:
          ValueError: as `log_prob`, for ``noise`` in place of ``x``; if a mixture
            has no ``gumbel``, or one of another shape.
          TypeError: if ``gumbel`` is given to a model that is not a mixture.

        Example:

        >>> import numpy as np
        >>> from keras_models import MAF
        >>> model = MAF(2, hidden_units=[8], num_layers=2)
        >>> noise = np.random.default_rng(0).standard_normal((3, 2)).astype(np.float32)
        >>> model.sample_from_noise(noise).shape
        TensorShape([3, 2])
        """
        noise = _checks.check_x(self, noise)
        y = _checks.check_y(self, y, "call sample_from_noise(noise, y)")
        C = self.mixture_components
        if C is None and gumbel is not None:
            raise TypeError(f"{self.name}: gumbel= picks the components of a mixture (MADEMoG, MAFMoG); "
                            f"{type(self).__name__} samples from noise alone.")
        if C is not None:
            if gumbel is None:
                raise ValueError(f"{self.name}: sample_from_noise(noise, gumbel=...) needs standard Gumbel "
                                 f"draws of shape [n, {self.event_size}, {C}], one per variable and component.")
            gumbel = tf.cast(gumbel, self.compute_dtype)
            if gumbel.shape.rank is not None and gumbel.shape[1:] != [self.event_size, C]:
                raise ValueError(f"{self.name}: expected gumbel of shape [n, {self.event_size}, {C}], "
                                 f"got shape {gumbel.shape.as_list()}.")
        if not tf.executing_eagerly():
            return self._noise_sample(noise, y, gumbel)
        # One traced program per model for every n (see log_prob), in parts of many rows.
        from_noise = model_function(self, "sample_from_noise", y, self._noise_sample, x=noise)
        return noise_in_parts(from_noise, noise, y, gumbel, sample_rows_per_call(self.event_size))

    def _noise_sample(self, noise, y, gumbel):
        with full_passes(), without_gradients(), kernels_as_stored():
            return self._from_noise(noise, y, gumbel)

    @property
    def mixture_components(self) -> int | None:
        """``C``, the components of each conditional of a mixture model (`MADEMoG`,
        `MAFMoG`), whose `sample_from_noise` takes ``gumbel``; None for the others."""
        return None

    def _from_noise(self, noise, y, gumbel) -> tf.Tensor:
        raise NotImplementedError

    def export(self, filepath, format="tf_saved_model", verbose=None, input_signature=None, **kwargs):
        """Keras' export, with this model's endpoints (`keras_models.export`): ``serve``
        is the call (log p per row; ``serve((x, y))`` for a conditional model), and
        ``log_prob`` and ``sample`` are served beside it. Other formats go to Keras.

        Args:
          filepath: the directory to write.
          format: ``"tf_saved_model"`` (this model's endpoints,
            `keras_models.export.export_saved_model`), ``"onnx"`` or ``"litert"``
            (`keras_models.portable`: ``log_prob`` and ``sample_from_noise``), or
            another of Keras' formats (Keras' own export, ``serve`` only).
          verbose: print Keras' summary of the endpoints.
          input_signature: ``serve``'s, as Keras takes it (default: ``x`` or
            ``(x, y)`` with any number of rows, in the model's dtype).
          **kwargs: ``endpoint`` and ``opset`` for ``"onnx"``
            (`keras_models.portable.export_onnx`); passed to Keras for its formats.

        The SavedModel needs TensorFlow only to load and run; see
        `keras_models.export.export_saved_model` for an example that reloads it
        and calls every endpoint.
        """
        if format in ("onnx", "litert"):
            from keras_models.portable import export_portable

            return export_portable(self, filepath, format, input_signature, kwargs)
        if format != "tf_saved_model":
            return super().export(filepath, format=format, verbose=verbose,
                                  input_signature=input_signature, **kwargs)
        if kwargs:
            raise TypeError(f"{self.name}: export(format='tf_saved_model') takes no {sorted(kwargs)}.")
        from keras_models.export import export_saved_model

        export_saved_model(self, filepath, verbose=bool(verbose), input_signature=input_signature)

    def save(self, filepath, *args, **kwargs):
        """Keras' ``save``. Keras' legacy HDF5 format (a path ending ``.h5``), which
        cannot hold these models, is refused before a file is opened
        (`keras_models._checks.check_save_path`)."""
        _checks.check_save_path(self, filepath)
        return super().save(filepath, *args, **kwargs)

    def set_weights(self, weights):
        super().set_weights(weights)
        apply_masks(self)  # MADE kernels hold zeros outside their masks (`tfp_maf.MaskedDense`)

    def set_batch_norm_statistics(self, x, y=None, batch_size: int | None = None) -> None:
        """Every batch norm's statistics from the whole training set (the paper's
        evaluation-time statistics; `keras_models.batch_norm_statistics`).

        `keras_models.training.fit_as_paper` does this before each validation and
        at the end of training; call it after a training loop of your own, before
        evaluating or sampling.

        Args:
          x: the training data ``[N, D]``.
          y: the training side information ``[N, K]`` for a conditional model.
          batch_size: rows per call through the flow; None: about 2 million values
            (at most 10,000 rows), which keeps the pass's temporary memory small.

        Example:

        >>> import numpy as np
        >>> from keras_models import MAF
        >>> x = np.random.default_rng(0).normal(3.0, 2.0, (100, 2)).astype(np.float32)
        >>> model = MAF(2, num_layers=1, hidden_units=[8])
        >>> model.set_batch_norm_statistics(x)
        >>> bool(np.allclose(model.norms[0].mean.numpy(), x.mean(0), atol=1e-5))
        True
        """
        set_batch_norm_statistics(self, x, y, batch_size)

    def get_config(self):
        config = super().get_config()
        config.update(event_size=self.event_size, conditional_dims=self.conditional_dims)
        return config

    @classmethod
    def from_config(cls, config):
        config = {key: value for key, value in config.items() if key not in cls.retired_config_keys}
        return cls(**config)

    @classmethod
    def refuse_fixed(cls, kwargs) -> None:
        """TypeError for a keyword in ``kwargs`` that this model fixes (`fixed_keywords`)."""
        for key in cls.fixed_keywords:
            if key in kwargs:
                raise cls._not_taken(key)

    @classmethod
    def _not_taken(cls, key: str) -> TypeError:
        return TypeError(f"{cls.__name__} takes no keyword {key!r}: it takes {', '.join(keywords(cls))}.")


#: Keras' own model keywords, which every model passes on to `keras.Model`.
KERAS_KEYWORDS = ("name", "dtype", "trainable")


def keywords(cls) -> tuple[str, ...]:
    """The keywords ``cls(event_size, ...)`` takes, a `DensityModel` class: those its
    constructors declare, less its `DensityModel.fixed_keywords`, then `KERAS_KEYWORDS`.

    Example:

    >>> from keras_models import Gaussian
    >>> keywords(Gaussian)
    ('conditional_dims', 'name', 'dtype', 'trainable')
    """
    declared = []
    for klass in cls.__mro__[:cls.__mro__.index(DensityModel) + 1]:  # mixins too, not Keras'
        init = klass.__dict__.get("__init__")
        for parameter in inspect.signature(init).parameters.values() if init else ():
            if (parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)
                    and parameter.name not in ("self", "event_size", *declared, *cls.fixed_keywords)):
                declared.append(parameter.name)
    return (*sorted(declared), *KERAS_KEYWORDS)

