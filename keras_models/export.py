"""SavedModel export: the signatures a serving client reads (`export_saved_model`).

`export_saved_model` writes the SavedModel; ``model.export(path)`` of every
`keras_models.DensityModel` calls it.
"""

from __future__ import annotations

import tensorflow as tf

from keras_models._checks import unpack
from tfp_maf._platform import compat
from tfp_maf.sampling import full_passes, without_xla

__all__ = ["export_saved_model"]


def export_saved_model(model, path: str, verbose: bool = False, input_signature=None,
                       portable: bool = False) -> None:
    """Writes a TensorFlow SavedModel with its signatures, for TF Serving and Python alike.

    The signatures, as ``saved_model_cli show --all`` lists them (``-1``: any size;
    ``D = model.event_size``, ``K = model.conditional_dims``, float: the model's dtype;
    ``y`` for a conditional model only)::

        serve, serving_default   x float [-1, D], y float [-1, K]   -> log_prob float [-1]
        log_prob                 x float [-1, D], y float [-1, K]   -> log_prob float [-1]
        sample                   n int32 [], seed int32 [2],
                                 y float unknown_rank               -> samples float [-1, D]
        sample_from_noise        noise float [-1, D], y float [-1, K],
                                 gumbel float [-1, D, C]            -> samples float [-1, D]

    ``serving_default`` is ``serve``, as Keras' own ``model.export`` makes it.
    ``sample_from_noise`` is `DensityModel.sample_from_noise`: the samples that
    standard normal ``noise`` gives, for a client that draws the noise itself; the
    mixtures (`MADEMoG`, `MAFMoG`, ``C = model.mixture_components``) take standard
    Gumbel ``gumbel`` too, which picks each variable's component.
    ``log_prob`` is log p(x) (log p(x | y)) per row; ``y`` has one row per row of ``x``,
    or a single row for all of them. ``sample`` gives ``n`` draws, the same for the
    same ``seed`` (two int32s) and the same as the Python API's ``model.sample(n, y,
    seed=seed)``: for a conditional model ``y`` is ``[K]`` (or ``[1, K]``), n draws
    given it, or ``[n, K]``, one draw per row, so that one request samples n
    conditions; other row counts are refused. Its rank is left open in the signature
    (``unknown_rank``) so that both forms reach it.

    TF Serving's REST API gives a signature's only output without its name
    (``{"predictions": [...]}`` for a request of ``instances``, ``{"outputs": [...]}``
    for one of ``inputs``); its gRPC API and ``tf.saved_model.load(path).signatures``
    key it by name.

    The signatures check what comes (widths and ranks, ``n >= 0``, rows of ``y``)
    inside the graph, where a TF Serving request reaches them, and fail with the
    Python API's messages: a request with ``x`` of shape ``[7, 5]`` fails with
    ``maf: expected x with 3 columns, got shape [7, 5].`` (after TensorFlow's
    ``assertion failed:``), not deep inside a matmul.

    In Python, ``tf.saved_model.load(path)`` has ``serve``, ``log_prob`` and
    ``sample`` as functions that return the tensor itself: ``log_prob(x)``
    (``log_prob(x, y)``), ``sample(n, seed)`` (``sample(n, seed, y)``), ``serve(x)``
    (``serve((x, y))``), checked as the signatures are. ``keras.layers.TFSMLayer(path)``
    reloads ``serve`` as a layer (with ``dtype="float64"`` for a float64 model: the
    layer casts its inputs to its own dtype). The SavedModel needs TensorFlow only:
    it loads where tfp_maf, TFP and Keras are not installed. It holds no XLA program
    (the samplers are traced within `tfp_maf.sampling.without_xla`), so TF Serving
    runs every signature with its default flags, XLA's JIT off.

    ``model.export(path)`` calls this.

    Args:
      model: a `DensityModel`.
      path: the directory to write.
      verbose: print the signatures.
      input_signature: ``serve``'s, as Keras' ``model.export`` takes it (default:
        ``[x]``, or ``[(x, y)]`` for a conditional model, with any number of rows, in
        the model's dtype).
      portable: trace every signature with the ops that ONNX and LiteRT converters
        take (`tfp_maf.sampling.full_passes`), as `keras_models.portable` does; the
        values are the same, some signatures slower (D passes of a MADE to sample).

    Example: export, then load with TensorFlow alone and call each endpoint:

    >>> import os, tempfile, numpy as np, tensorflow as tf
    >>> from keras_models import MADE
    >>> model = MADE(2, hidden_units=[8])
    >>> path = os.path.join(tempfile.mkdtemp(), "made")
    >>> export_saved_model(model, path)  # what model.export(path) does
    >>> served = tf.saved_model.load(path)
    >>> x = np.zeros((3, 2), np.float32)
    >>> bool(np.allclose(served.log_prob(x), model.log_prob(x)))
    True
    >>> served.sample(tf.constant(4), tf.constant([0, 1])).shape
    TensorShape([4, 2])
    >>> sorted(served.signatures)
    ['log_prob', 'sample', 'sample_from_noise', 'serve', 'serving_default']
    >>> served.signatures["serve"](x=tf.constant(x))["log_prob"].shape  # as TF Serving calls it
    TensorShape([3])
    """
    D, K = model.event_size, model.conditional_dims
    dtype = tf.as_dtype(model.compute_dtype)
    checks = _GraphChecks(model)
    x_spec = tf.TensorSpec([None, D], dtype, name="x")
    noise_spec = tf.TensorSpec([None, D], dtype, name="noise")
    n_spec = tf.TensorSpec([], tf.int32, name="n")
    seed_spec = tf.TensorSpec([2], tf.int32, name="seed")

    def serve(inputs):
        x, y, _ = unpack(inputs)
        x, y = checks.x_and_y(x, y, "serve")
        return model(x if y is None else (x, y), training=False)

    if K is None:
        specs = {"log_prob": [x_spec], "sample": [n_spec, seed_spec], "sample_from_noise": [noise_spec]}
        serve_signature = [x_spec]

        def log_prob(x):
            return model.log_prob(checks.x_and_y(x, None, "log_prob")[0])

        def sample(n, seed):
            return model.sample(checks.count(n), seed=seed)

        def sample_from_noise(noise, *gumbel):
            noise = checks.x_and_y(noise, None, "sample_from_noise", "noise")[0]
            return model.sample_from_noise(noise, None, *checks.gumbel(noise, gumbel))
    else:
        y_spec = tf.TensorSpec([None, K], dtype, name="y")
        specs = {"log_prob": [x_spec, y_spec], "sample": [n_spec, seed_spec, tf.TensorSpec(None, dtype, name="y")],
                 "sample_from_noise": [noise_spec, y_spec]}
        serve_signature = [(x_spec, y_spec)]

        def log_prob(x, y):
            return model.log_prob(*checks.x_and_y(x, y, "log_prob"))

        def sample(n, seed, y):
            n = checks.count(n)
            y = checks.sample_y(n, y)
            # TFP's sampler divides by the rows of y: n = 0 draws nothing rather than run it.
            return tf.cond(n > 0, lambda: model.sample(n, y, seed=seed), lambda: tf.zeros([0, D], dtype))

        def sample_from_noise(noise, y, *gumbel):
            noise, y = checks.x_and_y(noise, y, "sample_from_noise", "noise")
            return model.sample_from_noise(noise, y, *checks.gumbel(noise, gumbel))

    if model.mixture_components is not None:
        specs["sample_from_noise"].append(tf.TensorSpec([None, D, model.mixture_components], dtype, name="gumbel"))
    specs["serve"] = tf.nest.map_structure(_tensor_spec, input_signature or serve_signature)
    root = tf.train.Checkpoint()  # a public trackable that takes any attribute
    outputs = {"serve": ("log_prob", [-1]), "log_prob": ("log_prob", [-1]), "sample": ("samples", [-1, D]),
               "sample_from_noise": ("samples", [-1, D])}
    endpoints = {"serve": serve, "log_prob": log_prob, "sample": sample, "sample_from_noise": sample_from_noise}
    signatures = {}
    for name, fn in endpoints.items():
        # No XLA program in the graph: TF Serving runs none unless started with
        # --xla_cpu_compilation_enabled=true (`tfp_maf.sampling.without_xla`).
        fn = _within(full_passes if portable else without_xla, fn)
        # The attribute returns the tensor itself (TFSMLayer reads ``serve`` so); the
        # signature calls it and names its output, the key TF Serving's clients read.
        # `save` traces both, in its own context, so the attribute is traced once.
        endpoint = tf.function(fn, input_signature=specs[name], autograph=False)
        setattr(root, name, endpoint)
        signatures[name] = tf.function(_named(endpoint, outputs[name][0], name), input_signature=specs[name],
                                       autograph=False)
    signatures["serving_default"] = signatures["serve"]
    options = tf.saved_model.SaveOptions()
    with compat.save_context(options):  # traced as the save traces them: once
        _track_variables(root, signatures.values())
    tf.saved_model.save(root, path, signatures=signatures, options=options)
    if verbose:
        print(f"Saved artifact at '{path}'. Signatures (-1: any size):")
        for key in ("serving_default", *endpoints):
            name = "serve" if key == "serving_default" else key
            inputs = ", ".join(_describe(spec) for spec in tf.nest.flatten(specs[name]))
            print(f"  {key}({inputs}) -> {outputs[name][0]}: {dtype.name} {outputs[name][1]}")


def _track_variables(root, functions) -> None:
    """Tracks, under ``root``, the TensorFlow variables that ``functions`` read.

    These, not the model's Keras variables: a Keras variable wraps a `tf.Variable`, and
    a SavedModel that tracks only the wrappers writes a second handle per variable.
    ``tf.saved_model.load`` maps both to the same values, but TensorFlow's session
    loader (``saved_model_cli run``, TF Serving, the C API) restores the tracked handles
    and runs graphs that read the others: "Could not find variable output/kernel".
    Keras' own ``ExportArchive`` tracks them so too. ``variables``,
    ``trainable_variables`` and ``non_trainable_variables`` are the lists
    ``keras.layers.TFSMLayer`` reads."""
    used = {}
    for function in functions:
        for variable in function.get_concrete_function().variables:
            used.setdefault(id(variable), variable)
    root.variables = list(used.values())
    root.trainable_variables = [v for v in root.variables if v.trainable]
    root.non_trainable_variables = [v for v in root.variables if not v.trainable]


def _within(context, fn):
    """``fn``, called within ``context()``: traced there, as a signature is."""
    def called_within(*args):
        with context():
            return fn(*args)

    return called_within


def _named(endpoint, output: str, name: str):
    def named(*args):
        return {output: endpoint(*args)}

    # LiteRT's converter keys a signature by its function's name: two of one name
    # (``named``) convert to a single ``serving_default``.
    named.__name__ = name
    return named


def _tensor_spec(spec) -> tf.TensorSpec:
    """A `tf.TensorSpec` of a ``keras.InputSpec``, a Keras tensor or a `tf.TensorSpec`."""
    if isinstance(spec, tf.TensorSpec):
        return spec
    return tf.TensorSpec(spec.shape, spec.dtype, name=getattr(spec, "name", None))


def _describe(spec: tf.TensorSpec) -> str:
    shape = "unknown_rank" if spec.shape.rank is None else [-1 if d is None else d for d in spec.shape.as_list()]
    return f"{spec.name}: {spec.dtype.name} {shape}"


def _shape_text(tensor) -> tf.Tensor:
    """``tensor``'s shape at run time, written as the Python API writes one: ``[7, 5]``."""
    dims = tf.strings.reduce_join(tf.strings.as_string(tf.shape(tensor)), separator=", ")
    return tf.strings.join(["[", dims, "]"])


def _rank_and_last(tensor):
    """``tensor``'s rank and last dimension (-1 for a scalar) at run time.

    Not ``tf.rank`` nor ``tf.size(tf.shape(.))``: TensorFlow folds those to the
    signature's static rank (Grappler materialises Rank, Size and Shape where shapes
    are known), and a request of another rank would pass. Counting the dimensions
    through a comparison of their values is not folded."""
    shape = tf.shape(tensor)
    rank = tf.reduce_sum(tf.cast(shape >= 0, tf.int32))
    return rank, tf.concat([[-1], shape], 0)[rank]


def _after(tensor, condition, *message):
    """``tensor``, once ``condition`` holds; else the call fails with ``message`` (strings
    and string tensors, joined), before anything that reads ``tensor`` runs."""
    check = tf.debugging.Assert(condition, [tf.strings.join(list(message))])
    with tf.control_dependencies([check]):
        return tf.identity(tensor)


class _GraphChecks:
    """The Python API's input checks (`keras_models._checks`) as graph ops, with its messages.

    A signature's input shape is not enforced where a SavedModel is served (TF Serving
    and a loaded signature feed whatever came), so the static checks of the Python API
    pass there and a wrong width reached a matmul. These read shapes at run time,
    with ``tf.shape`` rather than ``.shape`` or ``tf.rank``, which
    would give the signature's static shape and fold the check away (`_rank_and_last`).
    """

    def __init__(self, model):
        self.name, self.D, self.K = model.name, model.event_size, model.conditional_dims

    def _matrix(self, arg: str, tensor, width: int, call: str):
        """``tensor`` ``[rows, width]``."""
        rank, last = _rank_and_last(tensor)
        got = _shape_text(tensor)
        hint = self._label_hint(arg, rank) if arg == "y" else ""
        tensor = _after(tensor, tf.equal(last, width) | tf.not_equal(rank, 2),
                        f"{self.name}: expected {arg} with {width} columns, got shape ", got, ".")
        return _after(tensor, tf.equal(rank, 2) & tf.equal(last, width),
                      f"{self.name}: {call} expects {arg} of shape [rows, {width}], got shape ", got, ".", hint)

    def _label_hint(self, arg, rank):
        # A label per row is the likeliest y of the wrong shape (as `_checks` says it).
        return tf.where(rank <= 1, f" Class labels go in one-hot, keras.utils.to_categorical(labels, {self.K}).", "")

    def x_and_y(self, x, y, call: str, x_name: str = "x"):
        """``x`` ``[rows, D]`` and ``y`` ``[rows, K]`` or ``[1, K]`` (None if unconditional)."""
        x = self._matrix(x_name, x, self.D, call)
        if y is None:
            return x, None
        y = self._matrix("y", y, self.K, call)
        rows_x, rows_y = tf.shape(x)[0], tf.shape(y)[0]
        y = _after(y, tf.equal(rows_y, rows_x) | tf.equal(rows_y, 1),
                   f"{self.name}: {call}({x_name}, y) needs a row of y per row of {x_name} (or one row for all), "
                   f"got {x_name} of shape ", _shape_text(x), " and y of shape ", _shape_text(y), ".")
        return x, y

    def gumbel(self, noise, gumbel: tuple) -> tuple:
        """A mixture's ``gumbel`` ``[rows of noise, D, C]`` (``()`` for other models)."""
        if not gumbel:
            return ()
        (g,) = gumbel
        shape, want = tf.shape(g), tf.concat([tf.shape(noise)[:1], tf.shape(g)[1:]], 0)
        return (_after(g, tf.reduce_all(tf.equal(shape, want)),
                       f"{self.name}: sample_from_noise needs a row of gumbel per row of noise, got noise of shape ",
                       _shape_text(noise), " and gumbel of shape ", _shape_text(g), "."),)

    def count(self, n):
        """``n >= 0``."""
        got = tf.strings.as_string(n)
        return _after(n, n >= 0, f"{self.name}: sample(n) needs an integer n >= 0, got n=", got, ".")

    def sample_y(self, n, y):
        """``y`` ``[K]``, ``[1, K]`` or ``[n, K]`` -> ``[n, K]``, one row per draw.

        ``sample(n, y)`` in Python draws n from ``y [K]`` with ``y`` broadcast to n rows,
        which gives the same draws as ``y`` tiled to ``[n, K]`` for one seed; so every
        form becomes ``[n, K]`` here, and the graph has one sampler, not one per form."""
        K, (rank, last) = self.K, _rank_and_last(y)
        got = _shape_text(y)
        y = _after(y, tf.equal(last, K),
                   f"{self.name}: expected y with {K} columns, got shape ", got, ".", self._label_hint("y", rank))
        y = _after(y, tf.equal(rank, 1) | tf.equal(rank, 2),
                   f"{self.name}: sample(n) needs y of shape [{K}] or [n, {K}], got shape ", got, ".")
        rows = tf.reshape(y, [-1, K])
        count = tf.strings.as_string(n)
        rows = _after(rows, tf.equal(tf.shape(rows)[0], n) | tf.equal(tf.shape(rows)[0], 1),
                      f"{self.name}: sample(n=", count, f") needs y of shape [{K}] or [", count, f", {K}], got shape ",
                      got, ".")
        return tf.broadcast_to(rows, tf.stack([n, K]))
