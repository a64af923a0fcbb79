"""The exported SavedModel as a serving client sees it: its signatures as
``saved_model_cli show --all`` prints them, TF Serving's REST ``predict`` bodies
answered by a process with TensorFlow only, and bad requests refused with the Python
API's messages."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import keras_models as km
from tfp_maf._platform.compat import XLA_MUST_COMPILE_ATTRIBUTE
from tfp_maf.testing import randomize_weights

D, K = 3, 2

# A TF Serving REST `predict`, done as its documentation describes (api_rest.md): the
# body picks a signature (default "serving_default"); "instances" (rows: a value per
# row for a single input, else an object per row) or "inputs" (columns: a value, or an
# object of inputs) become tensors of the signature's dtypes; the answer is
# {"predictions": ...} or {"outputs": ...}, a signature's only output given without its
# name, as TF Serving gives it, and {"error": ...} on failure.
CLIENT = """
import json, sys

SERVING_ONLY = ("tfp_maf", "keras_models", "tensorflow_probability", "keras", "tf_keras")
for name in SERVING_ONLY:
    sys.modules[name] = None  # as where only TensorFlow is installed: importing one fails
import numpy as np
import tensorflow as tf


def predict(model, request):
    fn = model.signatures[request.get("signature_name", "serving_default")]
    specs = fn.structured_input_signature[1]
    if "instances" in request:
        rows = request["instances"]
        if isinstance(rows[0], dict):
            columns = {name: [row[name] for row in rows] for name in rows[0]}
        else:
            columns = {next(iter(specs)): rows}
    else:
        inputs = request["inputs"]
        columns = inputs if isinstance(inputs, dict) else {next(iter(specs)): inputs}
    try:
        tensors = {name: tf.constant(np.asarray(value, specs[name].dtype.as_numpy_dtype))
                   for name, value in columns.items()}
        outputs = {name: value.numpy().tolist() for name, value in fn(**tensors).items()}
    except tf.errors.InvalidArgumentError as err:
        return {"error": err.message}
    if "instances" in request:
        if len(outputs) == 1:
            return {"predictions": next(iter(outputs.values()))}
        return {"predictions": [dict(zip(outputs, row)) for row in zip(*outputs.values())]}
    return {"outputs": next(iter(outputs.values())) if len(outputs) == 1 else outputs}


def show(model):
    # What `saved_model_cli show --all` prints of each signature.
    def specs(structure):
        return {name: [spec.dtype.name, None if spec.shape.rank is None else
                       [-1 if d is None else d for d in spec.shape.as_list()]]
                for name, spec in structure.items()}
    return {key: {"inputs": specs(fn.structured_input_signature[1]), "outputs": specs(fn.structured_outputs)}
            for key, fn in model.signatures.items()}


requests = json.load(open(sys.argv[1]))
answers = {}
for path in sorted({path for path, _ in requests.values()}):
    model = tf.saved_model.load(path)
    answers[path] = show(model)
    for label, (where, body) in requests.items():
        if where == path:
            answers[label] = predict(model, json.loads(body))
json.dump(answers, open(sys.argv[2], "w"))
assert all(sys.modules[name] is None for name in SERVING_ONLY)
"""


def _model(conditional: bool, dtype="float32"):
    model = km.MAF(D if conditional else 2, hidden_units=[8], num_layers=1, seed=0,
                   conditional_dims=K if conditional else None, dtype=dtype,
                   name="maf")  # named: the messages start with it, whatever models this worker made before
    randomize_weights(model, seed=1, scale=0.3)  # not the identity it starts as
    return model


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A conditional float32 MAF and an unconditional float64 one, exported."""
    out = tmp_path_factory.mktemp("export")
    conditional, unconditional = _model(True), _model(False, "float64")
    conditional.export(str(out / "conditional"))  # Keras' own call
    from keras_models.export import export_saved_model

    export_saved_model(unconditional, str(out / "unconditional"))
    return {"conditional": (conditional, str(out / "conditional")),
            "unconditional": (unconditional, str(out / "unconditional"))}


def _python_message(call) -> str:
    with pytest.raises(ValueError) as err:
        call()
    return str(err.value)


def test_tf_serving_rest_bodies_answered_by_tensorflow_alone(exported, tmp_path):
    model, path = exported["conditional"]
    plain, plain_path = exported["unconditional"]
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(4, D)).astype(np.float32), np.eye(K, dtype=np.float32)[[0, 1, 1, 0]]
    x2 = rng.normal(size=(3, 2))
    one = [0.0, 1.0]
    requests = {
        "rows": {"signature_name": "log_prob",
                 "instances": [{"x": a.tolist(), "y": b.tolist()} for a, b in zip(x, y, strict=True)]},
        "columns": {"inputs": {"x": x.tolist(), "y": y.tolist()}},  # serving_default
        "sample_one_y": {"signature_name": "sample", "inputs": {"n": 4, "seed": [1, 2], "y": one}},
        "sample_y_per_row": {"signature_name": "sample", "inputs": {"n": 4, "seed": [1, 2], "y": y.tolist()}},
        "wrong_width": {"signature_name": "log_prob", "inputs": {"x": np.zeros((7, 5)).tolist(), "y": y.tolist()}},
        "negative_n": {"signature_name": "sample", "inputs": {"n": -1, "seed": [1, 2], "y": one}},
        "rows_not_n": {"signature_name": "sample", "inputs": {"n": 3, "seed": [1, 2], "y": y.tolist()}},
        "plain_rows": {"instances": x2.tolist()},  # one input: a bare value per row
        "plain_sample": {"signature_name": "sample", "inputs": {"n": 3, "seed": [1, 2]}},
        "plain_wrong_width": {"instances": np.zeros((2, 4)).tolist()},
        "plain_negative_n": {"signature_name": "sample", "inputs": {"n": -1, "seed": [1, 2]}},
    }
    bodies = {label: (plain_path if label.startswith("plain") else path, json.dumps(body))
              for label, body in requests.items()}
    (tmp_path / "requests.json").write_text(json.dumps(bodies))
    done = subprocess.run([sys.executable, "-c", CLIENT, str(tmp_path / "requests.json"),
                           str(tmp_path / "answers.json")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    answers = json.loads((tmp_path / "answers.json").read_text())

    xy = {"x": ["float32", [-1, D]], "y": ["float32", [-1, K]]}
    log_p = {"log_prob": ["float32", [-1]]}
    assert answers[path] == {
        "serve": {"inputs": xy, "outputs": log_p},
        "serving_default": {"inputs": xy, "outputs": log_p},
        "log_prob": {"inputs": xy, "outputs": log_p},
        "sample": {"inputs": {"n": ["int32", []], "seed": ["int32", [2]], "y": ["float32", None]},
                   "outputs": {"samples": ["float32", [-1, D]]}},
        "sample_from_noise": {"inputs": {"noise": ["float32", [-1, D]], "y": ["float32", [-1, K]]},
                              "outputs": {"samples": ["float32", [-1, D]]}},
    }
    assert answers[plain_path]["serving_default"] == {"inputs": {"x": ["float64", [-1, 2]]},
                                                      "outputs": {"log_prob": ["float64", [-1]]}}
    assert answers[plain_path]["sample"]["outputs"] == {"samples": ["float64", [-1, 2]]}

    expected = model.log_prob(x, y).numpy()
    np.testing.assert_allclose(answers["rows"]["predictions"], expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(answers["columns"]["outputs"], expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(answers["sample_one_y"]["outputs"],
                               model.sample(4, np.float32(one), seed=[1, 2]), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(answers["sample_y_per_row"]["outputs"], model.sample(4, y, seed=[1, 2]),
                               rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(answers["plain_rows"]["predictions"], plain.log_prob(x2), rtol=1e-12)
    np.testing.assert_allclose(answers["plain_sample"]["outputs"], plain.sample(3, seed=[1, 2]), rtol=1e-12)

    # Refused with the Python API's own messages.
    for label, message in (
        ("wrong_width", _python_message(lambda: model.log_prob(np.zeros((7, 5), np.float32), y))),
        ("negative_n", _python_message(lambda: model.sample(-1, np.float32(one)))),
        ("rows_not_n", _python_message(lambda: model.sample(3, y))),
        ("plain_wrong_width", _python_message(lambda: plain.log_prob(np.zeros((2, 4))))),
        ("plain_negative_n", _python_message(lambda: plain.sample(-1))),
    ):
        assert message in answers[label]["error"], (label, message, answers[label])


@pytest.fixture(scope="module")
def loaded(exported):
    return tf.saved_model.load(exported["conditional"][1])


def test_log_prob_signature_refuses_shapes_the_python_api_would_broadcast_or_miss(loaded):
    signature = loaded.signatures["log_prob"]
    for inputs, message in (
        ({"x": [[0.0, 0.0, 0.0]], "y": [[0.0, 1.0], [1.0, 0.0]]},
         r"maf: log_prob\(x, y\) needs a row of y per row of x \(or one row for all\), got x of shape \[1, 3\] "
         r"and y of shape \[2, 2\]\."),
        ({"x": [0.0, 0.0, 0.0], "y": [[0.0, 1.0]]}, r"maf: log_prob expects x of shape \[rows, 3\], got shape \[3\]\."),
        ({"x": [[0.0, 0.0, 0.0]], "y": [1.0]},
         r"maf: log_prob expects y of shape \[rows, 2\], got shape \[1\]\. Class labels go in one-hot"),
    ):
        with pytest.raises(tf.errors.InvalidArgumentError, match=message):
            signature(**{name: tf.constant(value, tf.float32) for name, value in inputs.items()})


def test_loaded_functions_return_tensors_and_check_as_the_signatures_do(exported, loaded):
    model, _ = exported["conditional"]
    x, y = np.zeros((2, D), np.float32), np.float32([[0, 1], [1, 0]])
    np.testing.assert_allclose(loaded.serve((x, y)), model.log_prob(x, y), rtol=1e-6)
    np.testing.assert_allclose(loaded.log_prob(x, y), model.log_prob(x, y), rtol=1e-6)
    assert loaded.sample(tf.constant(0), tf.constant([1, 2]), tf.constant([0.0, 1.0])).shape == [0, D]
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"maf: sample\(n\) needs an integer n >= 0, got n=-2\."):
        loaded.sample(tf.constant(-2), tf.constant([1, 2]), tf.constant([0.0, 1.0]))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"maf: expected y with 2 columns, got shape \[3\]"):
        loaded.sample(tf.constant(3), tf.constant([1, 2]), tf.constant([0.0, 1.0, 0.0]))


def test_an_exported_unconditional_model_samples_no_rows(exported):
    # TF's sampling loop (the export holds no XLA program) scattered into an empty state,
    # which TF refuses: sample(n=0) failed in every unconditional autoregressive export.
    model, path = exported["unconditional"]
    loaded, width = tf.saved_model.load(path), model.event_size
    assert loaded.sample(tf.constant(0), tf.constant([1, 2])).shape == [0, width]
    assert loaded.signatures["sample"](n=tf.constant(0), seed=tf.constant([1, 2]))["samples"].shape == [0, width]
    assert loaded.sample(tf.constant(2), tf.constant([1, 2])).shape == [2, width]


@pytest.mark.parametrize("which", ["conditional", "unconditional"])
def test_the_saved_model_holds_no_xla_program(exported, which):
    """TF Serving turns XLA's JIT off by default: a function that must be XLA-compiled
    fails there on its first call. (``test_serving_runtimes`` runs every signature so.)"""
    from tensorflow.core.protobuf import saved_model_pb2

    saved = saved_model_pb2.SavedModel()
    with open(f"{exported[which][1]}/saved_model.pb", "rb") as f:
        saved.ParseFromString(f.read())
    functions = saved.meta_graphs[0].graph_def.library.function
    assert functions and not [f.signature.name for f in functions if f.attr[XLA_MUST_COMPILE_ATTRIBUTE].b]
