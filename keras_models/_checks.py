"""What a `DensityModel` accepts: each check raises an error that names what was
expected and what came, before TensorFlow would fail somewhere deeper (or not at all)."""

from __future__ import annotations

import inspect
import operator
import os
import types
from collections.abc import Mapping

import keras
import numpy as np
import tensorflow as tf

__all__ = ["batch_shape", "by_name", "check_compiled", "check_count", "check_data", "check_optimizer", "check_policy",
           "check_sample_y", "check_save_path", "check_seed", "check_whole_executions", "check_x", "check_y",
           "in_model_dtype", "unpack", "UNUSED_COMPILE_ARGUMENTS", "weights_kept"]


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


def in_model_dtype(model, method, kwargs) -> dict:
    """``kwargs`` of Keras' ``fit``, ``evaluate`` or ``predict`` with their arrays given as a
    `tf.data.Dataset` of the model's dtype, when that is not ``keras.config.floatx()``.

    Keras' adapters for NumPy arrays and tensors cast floating-point data to ``floatx()``:
    a float64 model fed float64 arrays would see them rounded to float32 (``predict``
    then differs from ``log_prob`` by 1e-7 where it should by 1e-15). A dataset is not
    cast, and no process-wide setting changes for the call (another thread's models, a
    callback's, keep their floatx). The dataset is what Keras makes of arrays: batches of
    ``batch_size`` (32 if none), shuffled each epoch as ``shuffle`` says (``fit``), the last
    ``validation_split`` of the rows held out before shuffling, and ``validation_data``'s
    arrays in batches of ``validation_batch_size``. Datasets, generators and
    `keras.utils.PyDataset` pass as they came."""
    dtype = model.compute_dtype
    if dtype == keras.config.floatx() or not _arrays(kwargs.get("x")):
        return kwargs
    name = method.__name__
    if name not in ("fit", "evaluate", "predict"):  # train_on_batch, test_on_batch: not cast
        return kwargs
    kwargs = dict(kwargs)
    batch_size = kwargs.pop("batch_size", None) or 32
    rows = _in_dtype((kwargs.pop("x"), kwargs.pop("y", None), kwargs.pop("sample_weight", None)), dtype)
    if name != "fit":
        kwargs["x"] = _dataset(rows).batch(batch_size)
        return kwargs
    split = kwargs.pop("validation_split", 0.0) or 0.0
    validation = kwargs.pop("validation_data", None)
    if split and validation is None:  # as Keras: validation_data overrides the split
        n = len(tf.nest.flatten(rows)[0])
        at = int(np.floor(n * (1.0 - split)))  # as Keras' train_validation_split
        validation = tuple(None if a is None else tf.nest.map_structure(lambda v: v[at:], a) for a in rows)
        rows = tuple(None if a is None else tf.nest.map_structure(lambda v: v[:at], a) for a in rows)
    elif _arrays(validation):
        given = tuple(validation) if isinstance(validation, (tuple, list)) else (validation,)
        validation = _in_dtype(keras.utils.unpack_x_y_sample_weight(given), dtype)
    if _arrays(validation):
        validation = _dataset(validation).batch(kwargs.pop("validation_batch_size", None) or batch_size)
    shuffle = kwargs.pop("shuffle", True)
    train = _dataset(rows)
    count = len(tf.nest.flatten(rows)[0])
    if shuffle == "batch":  # Keras: the batches' order
        train = train.batch(batch_size)
        train = train.shuffle(-(-count // batch_size), reshuffle_each_iteration=True)
    else:
        train = (train.shuffle(count, reshuffle_each_iteration=True) if shuffle else train).batch(batch_size)
    kwargs.update(x=train, shuffle=False)
    if validation is not None:
        kwargs["validation_data"] = validation
    return kwargs


def _arrays(x) -> bool:
    """Whether ``x`` is arrays (NumPy, tensors, lists, a DataFrame; nested or not), which
    Keras' array adapter would cast, rather than a stream."""
    stream = (tf.data.Dataset, types.GeneratorType, keras.utils.PyDataset)
    return x is not None and not isinstance(x, stream) and not callable(getattr(x, "__next__", None))


def _in_dtype(arrays, dtype):
    """``(x, y, sample_weight)`` as NumPy arrays, floating ones in ``dtype`` (as Keras casts
    them to floatx), without the trailing parts that are None."""
    def cast(a):
        a = np.asarray(a)
        return a.astype(dtype) if np.issubdtype(a.dtype, np.floating) else a
    arrays = list(arrays)
    while arrays and arrays[-1] is None:
        arrays.pop()
    return tuple(None if a is None else tf.nest.map_structure(cast, a) for a in arrays)


def _dataset(rows) -> tf.data.Dataset:
    """The rows of ``(x, y, sample_weight)`` as a dataset of Keras' step structure."""
    if len(rows) == 3 and rows[1] is None:  # sample weights without y: Keras' (x, None, w)
        return tf.data.Dataset.from_tensor_slices((rows[0], rows[2])).map(lambda x, w: (x, None, w))
    return tf.data.Dataset.from_tensor_slices(rows)


def check_x(model, x):
    """``x`` ``[..., D]`` of a floating dtype, cast to the model's."""
    _check_not_mapping(model, "x", x)
    x = tf.convert_to_tensor(x)
    if not x.dtype.is_floating:
        raise TypeError(f"{model.name}: expected floating-point x, got {x.dtype.name}.")
    x = tf.cast(x, model.compute_dtype)
    _check_width(model, "x", x.shape, model.event_size)
    return x


def check_y(model, y, usage: str = "pass (x, y)"):
    """``y`` ``[..., K]`` for a conditional model (None for an unconditional one), cast
    to the model's dtype. ``usage`` says how the call that lacked y takes it."""
    K = model.conditional_dims
    if K is None:
        if y is not None and not _no_columns(y):  # [N, 0]: see `weights_kept`
            raise ValueError(f"{model.name} is unconditional, but y was given.")
        return None
    if y is None:
        raise ValueError(f"{model.name} is conditional on y with {K} columns: {usage}.")
    _check_not_mapping(model, "y", y)
    y = tf.cast(tf.convert_to_tensor(y), model.compute_dtype)
    _check_width(model, "y", y.shape, K)
    return y


def _no_columns(y) -> bool:
    shape = getattr(y, "shape", None)
    return shape is not None and len(shape) > 0 and shape[-1] == 0


def by_name(method, args, kwargs) -> dict:
    """``method``'s arguments ``args`` and ``kwargs``, all by name."""
    bound = inspect.signature(method).bind(*args, **kwargs).arguments
    extra = next((bound.pop(p.name) for p in inspect.signature(method).parameters.values()
                  if p.kind is p.VAR_KEYWORD and p.name in bound), {})
    return {**bound, **extra}


def weights_kept(model, given: dict) -> dict:
    """``fit`` or ``evaluate``'s arguments by name, where an unconditional model gets
    ``sample_weight`` (or ``validation_data`` of ``(x, None, w)``) with array or tensor
    ``x``: ``y`` then an empty ``[N, 0]`` array, which the steps read as no ``y``
    (`check_y`). Keras' adapters drop a ``sample_weight`` that comes without ``y`` (Keras
    3.15): the model trained and evaluated unweighted, and said nothing.

    ``class_weight`` weighs rows by their class, read from ``y``: an unconditional model
    has none, and it is refused (Keras failed with an ``IndexError``)."""
    if model.conditional_dims is not None:
        return given
    if given.get("class_weight") is not None:
        raise ValueError(f"{model.name} is unconditional: class_weight weighs rows by their class, read from y, "
                         "and it has none; pass sample_weight, one weight per row.")
    given = dict(given)
    x, weights = given.get("x"), given.get("sample_weight")
    if weights is not None and given.get("y") is None and hasattr(x, "shape") and len(x.shape) > 0:
        given["y"] = np.zeros((x.shape[0], 0), np.float32)
    validation = given.get("validation_data")
    if (isinstance(validation, tuple) and len(validation) == 3 and validation[1] is None
            and validation[2] is not None and hasattr(validation[0], "shape")):
        given["validation_data"] = (validation[0], np.zeros((validation[0].shape[0], 0), np.float32), validation[2])
    return given


def batch_shape(model, x, y) -> tf.TensorShape:
    """The batch shape of checked ``x`` and ``y``: theirs broadcast (``x``'s alone for an
    unconditional model)."""
    if y is None:
        return x.shape[:-1]
    try:
        return tf.broadcast_static_shape(x.shape[:-1], y.shape[:-1])
    except ValueError:
        raise ValueError(f"{model.name}: expected x and y whose batch shapes broadcast (the shape but the last "
                         f"axis), got x of shape {x.shape.as_list()} and y of shape {y.shape.as_list()}.") from None


def _check_width(model, name, shape, width, unknown_ok=False):
    """``shape`` ends in ``width`` (or in an unknown width, if ``unknown_ok``)."""
    shape = tf.TensorShape(shape)
    if shape.rank is None or (unknown_ok and shape.rank > 0 and shape[-1] is None):
        return
    if shape.rank == 0 or shape[-1] != width:
        # A label per row (or one label) is the likeliest y of the wrong shape.
        hint = (f" Class labels go in one-hot, keras.utils.to_categorical(labels, {width})."
                if name == "y" and shape.rank <= 1 else "")
        raise ValueError(f"{model.name}: expected {name} with {width} columns, got shape {shape.as_list()}.{hint}")


def check_data(model, method, args, kwargs) -> None:
    """The widths of what ``fit``, ``evaluate`` or ``predict`` was given (arrays,
    tensors, a `tf.data.Dataset`; ``validation_data`` too), checked before Keras traces
    a step. The check in the step would see a step traced again after a failed one
    with its shapes relaxed (``[32, None]``) and could not say what came."""
    given = inspect.signature(method).bind_partial(*args, **kwargs).arguments
    for data in (given.get("x") if given.get("y") is None else (given.get("x"), given["y"]),
                 given.get("validation_data")):
        if isinstance(data, tf.data.Dataset):
            data = data.element_spec
        x, y, _ = keras.utils.unpack_x_y_sample_weight(data) if isinstance(data, tuple) else (data, None, None)
        if y is None and isinstance(x, tuple) and len(x) == 2:  # fit((x, y)), as `unpack` reads it
            x, y = x
        for name, value, width in (("x", x, model.event_size), ("y", y, model.conditional_dims)):
            _check_not_mapping(model, name, value)
            if width is not None and hasattr(value, "shape") and hasattr(value, "dtype"):
                _check_width(model, name, value.shape, width, unknown_ok=True)


def _check_not_mapping(model, name, value):
    """A dict (a multi-input Keras model's inputs) would fail in TF's conversion with
    a message that names neither the model nor the form it takes."""
    if isinstance(value, Mapping):
        raise TypeError(f"{model.name}: expected {name} as an array or tensor, got a dict with keys "
                        f"{sorted(value)}; pass x, or (x, y) for a conditional model.")


def check_count(n, owner: str):
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


def check_seed(seed, owner: str):
    """``sample``'s ``seed`` -> None, or the stateless seed: two int32s. An integer ``s``
    (Python, NumPy or a tensor) is ``(0, s)``: TFP would read a lone int as an op seed,
    and NumPy's integers once failed. Values beyond int32 are refused (a cast would wrap
    them, different seeds giving the same samples)."""
    if seed is None:
        return None
    if tf.is_tensor(seed) and not hasattr(seed, "numpy"):  # symbolic: checked where it runs
        seed = tf.cast(seed, tf.int32)
        return tf.stack([0, seed]) if seed.shape.rank == 0 else seed
    values = np.asarray(seed)
    if (values.dtype.kind not in "iu" or values.shape not in ((), (2,))
            or np.any(values < np.iinfo(np.int32).min) or np.any(values > np.iinfo(np.int32).max)):
        raise ValueError(f"{owner}: sample(seed=...) needs an integer or two, each within int32, got {seed!r}.")
    values = values.astype(np.int32)
    return tf.constant([0, values] if values.shape == () else values, tf.int32)


def check_sample_y(model, n, y):
    """``y`` for ``sample(n, y)``: one row ``[K]`` or ``[1, K]``, or ``[n, K]``.

    A single row given as ``[1, K]`` (``y[:1]``, a batch of one) broadcasts to the n
    samples as NumPy would, and comes back as ``[K]``."""
    y = check_y(model, y, "call sample(n, y)")
    K = model.conditional_dims
    if y is not None and y.shape.rank == 2:
        rows = y.shape[0]
        if rows == 1 and not (isinstance(n, int) and n == 1):
            return y[0]
        if rows is not None and isinstance(n, int) and rows != n:
            raise ValueError(f"{model.name}: sample(n={n}) needs y of shape [{K}] or [{n}, {K}], "
                             f"got shape {y.shape.as_list()}.")
    elif y is not None and y.shape.rank != 1:
        raise ValueError(f"{model.name}: sample(n) needs y of shape [{K}] or [n, {K}], got shape {y.shape.as_list()}.")
    return y


def check_whole_executions(model, method, args, kwargs, names) -> None:
    """Step counts given to ``method`` must be whole multiples of ``steps_per_execution``.

    Keras 3 runs its compiled loop ``steps_per_execution`` steps per call and counts
    only whole calls: on a repeated dataset, ``fit(steps_per_epoch=25)`` with 10 steps
    per call trains 30 steps, ``evaluate(steps=3)`` averages 10 batches and
    ``predict(steps=3)`` returns 10 (seen with Keras 3.15). `compile_as_paper` uses 10,
    so such a count is an error here rather than silently more work than was asked.
    """
    per_call = int(getattr(model, "steps_per_execution", 1) or 1)
    if per_call == 1:
        return
    given = inspect.signature(method).bind_partial(*args, **kwargs).arguments
    for name in names:
        steps = given.get(name)
        if steps is not None and steps > 0 and steps % per_call:
            raise ValueError(
                f"{model.name}: {name}={steps} is not a multiple of steps_per_execution={per_call}; Keras "
                f"would run {-(-steps // per_call) * per_call} steps. Pass a multiple of {per_call}, or compile "
                "with steps_per_execution=1 (`compile_as_paper(model, name, steps_per_execution=1)`)."
            )


def dataset_shuffle(method, args, kwargs) -> dict:
    """``kwargs`` with ``shuffle=False`` when ``x`` is a `tf.data.Dataset` or a Python
    generator and no ``shuffle`` was given: these are shuffled (or not) by whoever
    makes them, and Keras' default ``shuffle=True`` changes nothing there but a
    ``UserWarning`` on every ``fit`` call (Keras 3.15). A ``shuffle`` the caller gave
    is passed on as given."""
    given = inspect.signature(method).bind_partial(*args, **kwargs).arguments
    if "shuffle" in given or not isinstance(given.get("x"), (tf.data.Dataset, types.GeneratorType)):
        return kwargs
    return {**kwargs, "shuffle": False}


def check_policy(policy, owner: str) -> None:
    """Refuses dtype policies other than float32 and float64, saying why.

    Wholly 16-bit policies: a log-density sums D log-scales and log-determinants and
    exponentiates the log-scales, which bfloat16's 8-bit mantissa resolves to about 1%
    (8 nats of MNIST's -1300) and float16 overflows past e^11. Mixed policies need the
    matmuls in 16 bits and the affine maps, log-dets, base density and loss in float32;
    ``benchmarks/experiments/mixed_precision.py`` does that split by hand for a MAF and reaches
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


def check_save_path(model, filepath) -> None:
    """Refuses a path to Keras' legacy HDF5 format (``.h5``, ``.hdf5``), before Keras
    opens it for writing (which would empty a file already there).

    That format stores a model's weights by their short names, layer by layer: the
    kernels of one MADE are all ``kernel``, and h5py stops half-way with "name already
    exists". Loading one could not rebuild the model either. A ``.keras`` file holds
    everything the HDF5 file would have."""
    path = os.fspath(filepath) if isinstance(filepath, (str, os.PathLike)) else None
    if isinstance(path, str) and path.lower().endswith((".h5", ".hdf5")):
        raise ValueError(
            f"{model.name}: expected a path ending in .keras, got {path!r}: Keras' legacy HDF5 "
            "format cannot hold a tfp-maf model (its layers hold several weights of one name). "
            "Save it with model.save('model.keras'), its weights alone with "
            "model.save_weights('model.weights.h5'), or serve it with model.export(directory).")


#: What Keras' ``compile`` takes that a density model's steps never compute: its loss is
#: its mean negative log-likelihood (plus ``model.losses``), reported as ``loss``.
UNUSED_COMPILE_ARGUMENTS = ("loss", "loss_weights", "metrics", "weighted_metrics")


def check_optimizer(model) -> None:
    """Refuses an optimizer known to turn a flow's weights to NaN in the model's dtype:
    Keras' `keras.optimizers.Adafactor` where ``epsilon_1 ** 2`` is within 1e6 of the
    dtype's smallest normal number (its default 1e-30, in float32; 1e-15 passes).

    Adafactor's factored second moment of an entry is ``r_i c_j / mean(r)``, each factor
    at least ``epsilon_1``; where row ``i`` and column ``j`` of a gradient are both zero
    (a MADE's masks zero whole columns of the output kernel, a dead ReLU unit a row) the
    product underflows to 0, the update is 0 / 0, and its clipping by the update's RMS
    spreads the NaN over the whole kernel: a MAF's weights were NaN after its first step,
    with a finite loss (`tests/test_optimizers.py` shows it on a bare variable)."""
    optimizer = getattr(model, "optimizer", None)
    optimizer = getattr(optimizer, "inner_optimizer", optimizer)
    if type(optimizer) is not keras.optimizers.Adafactor:
        return
    epsilon = float(optimizer.epsilon_1)
    smallest = float(np.finfo(np.dtype(model.compute_dtype)).tiny) * 1e6  # room for r_i / mean(r)
    if epsilon * epsilon < smallest:
        raise ValueError(
            f"{model.name} cannot train with keras.optimizers.Adafactor(epsilon_1={epsilon:g}) in "
            f"{model.compute_dtype}: where a row and a column of a gradient are zero (a MADE's masks and dead "
            f"units make them) its second moment epsilon_1 ** 2 underflows to 0 and the update is NaN. Pass "
            f"epsilon_1={10.0 ** np.ceil(np.log10(np.sqrt(smallest))):.0e} or more.")


def check_compiled(model) -> None:
    """Refuses a model compiled with a ``loss`` or metrics (`UNUSED_COMPILE_ARGUMENTS`):
    Keras takes them, and the steps would train and report the negative
    log-likelihood without a word about them.

    Checked where they would act (``fit``, ``evaluate``, the ``*_on_batch`` calls), not
    in ``compile``: Keras does not compile a loaded model whose class overrides it."""
    config = model.get_compile_config() or {}
    unused = {key: config[key] for key in UNUSED_COMPILE_ARGUMENTS if config.get(key) is not None}
    if unused:
        raise ValueError(
            f"{model.name} was compiled with {', '.join(f'{k}={v!r}' for k, v in unused.items())}, which it "
            "would not compute: a density model's loss is its mean negative log-likelihood (plus "
            "model.losses), reported as 'loss'. Compile it with an optimizer alone, e.g. "
            "model.compile(optimizer='adam'); for other figures, call model.log_prob after training.")
