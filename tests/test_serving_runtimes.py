"""Every runtime that loads what we export: TensorFlow's session loader (what
``saved_model_cli run``, TF Serving and the C API use), ONNX Runtime and LiteRT.

The SavedModel matrix covers every zoo family, unconditional and conditional, float32
and float64, and a context network. In one process without tfp_maf, TFP and Keras, every
signature of every cell runs through ``saved_model_cli run``, which is the session loader
(``loader.load`` into a Session, then ``Session.run`` on the signature's tensors): the
``main`` its console script calls, given each command line, so that TensorFlow is imported
once rather than once a command, with XLA's JIT off as TF Serving has it by default. The
``saved_model_cli`` executable itself runs one cell. Each gives the Python API's values.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest

import keras_models as km
from keras_models.portable import ENDPOINTS, export_files, export_litert
from tfp_maf._platform import compat
from tfp_maf.testing import randomize_weights

D, K, N = 3, 2, 5
FAMILIES = ["gaussian", "made", "made-mog", "maf5", "maf-mog5", "realnvp5", "nsf5"]
# (family, conditional, dtype, context network): each family once, every pair of
# (conditional, dtype) at least once, the mixtures and the spline conditional (their
# samplers read y in the most places). Each family both ways runs in ONNX Runtime and
# LiteRT below, converted from its SavedModel; this matrix adds TensorFlow's own loaders,
# one process for all of it.
CELLS = [("gaussian", False, "float32", False), ("made", True, "float64", False),
         ("made-mog", True, "float32", False), ("maf5", False, "float64", False),
         ("maf-mog5", True, "float64", False), ("realnvp5", False, "float32", False),
         ("nsf5", True, "float32", False), ("maf5", True, "float32", True)]
assert sorted({cell[0] for cell in CELLS}) == sorted(FAMILIES)
SAMPLE_SEED = [1, 2]


def _model(family, conditional, dtype="float32", context=False):
    kwargs = {"conditional_dims": K if conditional else None, "dtype": dtype}
    if family != "gaussian":
        kwargs.update(hidden_units=[6], seed=0)
    if family in ("maf5", "maf-mog5", "realnvp5", "nsf5"):
        kwargs["num_layers"] = 2
    if family in ("made-mog", "maf-mog5"):
        kwargs["num_components"] = 2
    if context:
        kwargs["context_network"] = keras.Sequential([keras.layers.Dense(4, activation="tanh", dtype=dtype)])
    model = km.build(family, D, **kwargs)
    rng = np.random.default_rng(3)
    if family == "gaussian":
        x = rng.normal(size=(200, D))
        y = np.eye(K)[rng.integers(0, K, 200)] if conditional else None
        model.fit_closed_form(x * [1.0, 2.0, 0.5] + x[:, :1], y)
    else:
        randomize_weights(model, seed=1, scale=0.3)  # not the identity it starts as
    return model


def _inputs(conditional, dtype, components=None):
    rng = np.random.default_rng(0)
    feeds = {"x": rng.normal(size=(N, D)).astype(dtype), "noise": rng.normal(size=(N, D)).astype(dtype)}
    if conditional:
        feeds["y"] = np.eye(K, dtype=dtype)[[0, 1, 1, 0, 1]]
    if components:
        feeds["gumbel"] = rng.gumbel(size=(N, D, components)).astype(dtype)
    return feeds


def _noise_inputs(feeds):
    """The inputs of sample_from_noise: noise, y, gumbel."""
    return {name: feeds[name] for name in ("noise", "y", "gumbel") if name in feeds}


def _expected(model, feeds, sample=True):
    y = feeds.get("y")
    out = {"log_prob": model.log_prob(feeds["x"], y).numpy()}
    if sample:
        out["sample"] = model.sample(N, y, seed=SAMPLE_SEED).numpy()
    out["sample_from_noise"] = model.sample_from_noise(feeds["noise"], y, feeds.get("gumbel")).numpy()
    return out


# `saved_model_cli run` on every signature of every cell, in a process where tfp_maf, TFP
# and Keras cannot be imported: the function the `saved_model_cli` executable calls (its
# console-script entry point, as installed), given each command line in turn (absl keeps
# flags between parses: unparse_flags resets them). Its run is TensorFlow's session loader:
# `loader.load` into a Session, then `Session.run` on the signature's tensors.
#
# XLA's JIT is off, as in TF Serving: its main calls tensorflow::DisableXlaCompilation() unless
# started with --xla_cpu_compilation_enabled=true (off by default), and a graph holding an XLA
# program then fails on its first call. TF's Python API has no such switch: the client calls
# the C++ function from TF's library (`compat.tf_serving_xla_switch` finds it; the client
# cannot import tfp_maf).
CLI_CLIENT = """
import ctypes, json, sys
from importlib.metadata import entry_points
for name in ("tfp_maf", "keras_models", "tensorflow_probability", "keras", "tf_keras"):
    sys.modules[name] = None
from absl import flags
import tensorflow as tf

library, symbol = sys.argv[2:4]
getattr(ctypes.CDLL(library), symbol)()
try:
    tf.function(lambda: tf.constant(1.0) + 1.0, jit_compile=True)()
    raise AssertionError("XLA still compiles: the loader would not run as TF Serving's does")
except tf.errors.InternalError as refused:
    assert "XLA compilation disabled" in str(refused), refused

(script,) = entry_points(group="console_scripts", name="saved_model_cli")
main = script.load()

for argv in json.load(open(sys.argv[1])):
    flags.FLAGS.unparse_flags()
    sys.argv = ["saved_model_cli", *argv]
    try:
        main()
    except SystemExit as done:
        assert not done.code, f"saved_model_cli {' '.join(argv)}: exit {done.code}"
assert all(sys.modules[name] is None for name in ("tfp_maf", "keras", "tensorflow_probability"))
"""


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Every cell exported, with its inputs saved as .npy and the Python API's values."""
    root = tmp_path_factory.mktemp("matrix")
    cells = []
    for i, (family, conditional, dtype, context) in enumerate(CELLS):
        model = _model(family, conditional, dtype, context)
        path = str(root / f"{i}-{family}")
        model.export(path)
        feeds = _inputs(conditional, dtype, model.mixture_components)
        for name, value in feeds.items():
            np.save(f"{path}.{name}.npy", value)
        cells.append({"label": f"{family}, {'conditional' if conditional else 'unconditional'}, {dtype}"
                               f"{', context network' if context else ''}",
                      "dir": path, "expected": _expected(model, feeds), "dtype": dtype,
                      "calls": _calls(path, feeds)})
    return cells


def _calls(path, feeds):
    """The inputs of each signature, as file names (``x``, ``y``, ``noise``, ``gumbel``) or values."""
    y = {"y": f"{path}.y.npy"} if "y" in feeds else {}
    xy = {"x": f"{path}.x.npy", **y}
    return {"serve": xy, "log_prob": xy, "sample": {"n": N, "seed": SAMPLE_SEED, **y},
            "sample_from_noise": {name: f"{path}.{name}.npy" for name in _noise_inputs(feeds)}}


def _close(got, want, dtype, what):
    rtol = 1e-4 if dtype == "float32" else 1e-9
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol, err_msg=what)


def _want(cell, signature):
    return cell["expected"]["log_prob" if signature == "serve" else signature]


def test_every_cell_runs_in_tensorflows_session_loader_and_saved_model_cli(exported, tmp_path):
    """One test, so that one worker exports the matrix: every signature of every cell in
    ``saved_model_cli run``, then the executable on one cell."""
    outdirs = {(index, signature): tmp_path / f"{index}-{signature}"
               for index, cell in enumerate(exported) for signature in cell["calls"]}
    (tmp_path / "commands.json").write_text(json.dumps(
        [_cli_arguments(exported[index], signature, outdir) for (index, signature), outdir in outdirs.items()]))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    switch = compat.tf_serving_xla_switch()
    assert switch, "TensorFlow's library exports no DisableXlaCompilation(): see tfp_maf._platform.compat"
    done = subprocess.run([sys.executable, "-c", CLI_CLIENT, str(tmp_path / "commands.json"), *switch],
                          capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    for (index, signature), outdir in outdirs.items():
        cell = exported[index]
        (output,) = outdir.glob("*.npy")
        _close(np.load(output), _want(cell, signature), cell["dtype"], f"{cell['label']}: {signature}")

    # The executable, on the context network's cell drawing samples (--inputs and --input_exprs).
    cell, outdir = exported[-1], tmp_path / "executable"
    command = [str(Path(sys.executable).with_name("saved_model_cli")),
               *_cli_arguments(cell, "sample", outdir)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, f"{cell['label']}: sample\n{done.stderr[-3000:]}"
    (output,) = outdir.glob("*.npy")
    _close(np.load(output), _want(cell, "sample"), cell["dtype"], f"{cell['label']}: sample")


def _cli_arguments(cell, signature, outdir):
    """``saved_model_cli``'s arguments to run ``signature`` of ``cell`` into ``outdir``."""
    files = ";".join(f"{k}={v}" for k, v in cell["calls"][signature].items() if isinstance(v, str))
    exprs = ";".join(f"{k}={v}" for k, v in cell["calls"][signature].items() if not isinstance(v, str))
    arguments = ["run", "--dir", cell["dir"], "--tag_set", "serve", "--signature_def", signature,
                 "--outdir", str(outdir)]
    if files:
        arguments += ["--inputs", files]
    if exprs:
        arguments += ["--input_exprs", exprs]
    return arguments


@pytest.mark.parametrize("conditional", [False, True], ids=["unconditional", "conditional"])
@pytest.mark.parametrize("family", FAMILIES)
def test_onnx_runtime_and_litert_give_the_models_values(family, conditional, tmp_path):
    import onnxruntime
    from ai_edge_litert.interpreter import Interpreter

    model = _model(family, conditional)
    feeds = _inputs(conditional, "float32", model.mixture_components)
    expected = _expected(model, feeds, sample=False)
    files = export_files(model, str(tmp_path))  # every file, from one SavedModel
    litert = Interpreter(model_path=files["litert"]["log_prob, sample_from_noise"])
    assert sorted(litert.get_signature_list()) == sorted(ENDPOINTS)
    for endpoint in ENDPOINTS:
        inputs = ({"x": feeds["x"], **({"y": feeds["y"]} if conditional else {})} if endpoint == "log_prob"
                  else _noise_inputs(feeds))
        output = "log_prob" if endpoint == "log_prob" else "samples"
        (onnx_out,) = onnxruntime.InferenceSession(files["onnx"][endpoint]).run([output], inputs)
        _close(onnx_out, expected[endpoint], "float32", f"{family}: ONNX Runtime {endpoint}")
        lite_out = litert.get_signature_runner(endpoint)(**inputs)[output]
        _close(lite_out, expected[endpoint], "float32", f"{family}: LiteRT {endpoint}")
    # Rows far from the data (1e2 to 1e8 along a ray) score finite in both runtimes, as in
    # Python: the log tails and the log-scale bound convert with the flow.
    far = {"x": np.outer([1e2, 1e4, 1e6, 1e7, 1e8], np.linspace(1.0, -0.5, D)).astype(np.float32)[:N],
           **({"y": feeds["y"]} if conditional else {})}
    want = model.log_prob(far["x"], far.get("y")).numpy()
    assert np.all(np.isfinite(want)), (family, want)
    (onnx_far,) = onnxruntime.InferenceSession(files["onnx"]["log_prob"]).run(["log_prob"], far)
    _close(onnx_far, want, "float32", f"{family}: ONNX Runtime log_prob far from the data")
    _close(litert.get_signature_runner("log_prob")(**far)["log_prob"], want, "float32",
           f"{family}: LiteRT log_prob far from the data")


def test_model_export_writes_onnx_and_litert_files(tmp_path):
    """The Keras call, for each format and endpoint."""
    import onnxruntime
    from ai_edge_litert.interpreter import Interpreter

    model = _model("maf5", True)
    feeds = _inputs(True, "float32")
    path = model.export(str(tmp_path / "noise.onnx"), format="onnx", endpoint="sample_from_noise")
    (samples,) = onnxruntime.InferenceSession(path).run(["samples"], _noise_inputs(feeds))
    _close(samples, model.sample_from_noise(feeds["noise"], feeds["y"]), "float32", "ONNX")
    path = model.export(str(tmp_path / "model.tflite"), format="litert")
    log_p = Interpreter(model_path=path).get_signature_runner("log_prob")(x=feeds["x"], y=feeds["y"])["log_prob"]
    _close(log_p, model.log_prob(feeds["x"], feeds["y"]), "float32", "LiteRT")


def test_sample_from_noise_matches_sample():
    """The noise-to-sample map is the flow's forward direction: the model's own sampler,
    fed the same noise, draws the same samples."""
    model = _model("maf5", True)
    y = np.eye(K, dtype=np.float32)[[0, 1, 1]]
    base = model.distribution(y).distribution  # the base the flow transforms
    noise = base.sample(seed=[4, 5]).numpy()
    samples = model.sample_from_noise(noise, y).numpy()
    np.testing.assert_allclose(samples, model.distribution(y).sample(seed=[4, 5]).numpy(), atol=1e-5)


def test_a_mixtures_noise_sample_is_the_one_of_its_one_pass_sampler():
    """MADE MoG: the D-pass graph (what leaves TensorFlow) and the one-pass engine give the
    same sample for the same normal and Gumbel noise."""
    model = _model("made-mog", True)
    feeds = _inputs(True, "float32", model.mixture_components)
    portable = model.sample_from_noise(feeds["noise"], feeds["y"], feeds["gumbel"]).numpy()
    dist = model.distribution(feeds["y"])  # the MADE MoG of standardised columns, with log tails
    one_pass = dist.bijector.forward(dist.distribution.sample_from_noise(feeds["noise"], feeds["gumbel"])).numpy()
    np.testing.assert_allclose(portable, one_pass, atol=1e-5)


def test_bad_options_are_refused_with_the_reason(tmp_path):
    mixture = _model("made-mog", False)
    with pytest.raises(ValueError, match="needs standard Gumbel draws of shape \\[n, 3, 2\\]"):
        mixture.sample_from_noise(np.zeros((2, D), np.float32))
    with pytest.raises(ValueError, match="expected gumbel of shape \\[n, 3, 2\\], got shape \\[2, 3, 4\\]"):
        mixture.sample_from_noise(np.zeros((2, D), np.float32), gumbel=np.zeros((2, D, 4), np.float32))
    with pytest.raises(TypeError, match="samples from noise alone"):
        _model("maf5", False).sample_from_noise(np.zeros((2, D), np.float32), gumbel=np.zeros((2, D, 2)))
    with pytest.raises(ValueError, match="takes one of \\['log_prob', 'sample_from_noise'\\]"):
        mixture.export(str(tmp_path / "m.onnx"), format="onnx", endpoint="sample")
    with pytest.raises(ValueError, match="LiteRT runs float32"):
        export_litert(_model("made", False, "float64"), str(tmp_path / "m.tflite"))
    with pytest.raises(TypeError, match="takes no \\['endpoint'\\]"):
        _model("made", False).export(str(tmp_path / "sm"), endpoint="log_prob")


def test_the_serving_pages_onnx_and_litert_blocks_run_alone(tmp_path, monkeypatch):
    page = (Path(__file__).parents[1] / "docs" / "serving.md").read_text()
    section = page.split("## ONNX Runtime and LiteRT", 1)[1]
    blocks = [block.split("```", 1)[0] for block in section.split("```python\n")[1:]]
    assert len(blocks) == 2
    monkeypatch.chdir(tmp_path)
    for block in blocks:
        exec(compile(block, "docs/serving.md", "exec"), {})  # each on its own


def _stand_in_prediction_service(path):
    """TF Serving's gRPC ``Predict`` for one SavedModel: the signature the request names,
    its inputs and named outputs as TensorProtos. Enough to run the page's client."""
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    loaded = tf.saved_model.load(path)

    class StandIn(prediction_service_pb2_grpc.PredictionServiceServicer):
        def Predict(self, request, context):  # noqa: N802 (the service's method name)
            signature = loaded.signatures[request.model_spec.signature_name or "serving_default"]
            inputs = {name: tf.constant(tf.make_ndarray(proto)) for name, proto in request.inputs.items()}
            response = predict_pb2.PredictResponse()
            for name, value in signature(**inputs).items():
                response.outputs[name].CopyFrom(tf.make_tensor_proto(value.numpy()))
            return response

    return StandIn()


def test_the_serving_pages_grpc_client_runs_against_a_local_prediction_service(tmp_path):
    from concurrent import futures

    import grpc
    from tensorflow_serving.apis import prediction_service_pb2_grpc

    model = km.MAF(2, hidden_units=[8], num_layers=2, seed=0)
    randomize_weights(model, seed=1, scale=0.3)
    model.export(str(tmp_path / "maf5"))
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(
        _stand_in_prediction_service(str(tmp_path / "maf5")), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        page = (Path(__file__).parents[1] / "docs" / "serving.md").read_text()
        (block,) = [b.split("```", 1)[0] for b in page.split("```python\n")[1:] if "PredictRequest" in b]
        namespace = {}
        exec(compile(block.replace("localhost:8500", f"127.0.0.1:{port}"), "docs/serving.md", "exec"), namespace)
    finally:
        server.stop(None)
    x = np.array([[0.0, 0.0], [4.0, 4.0]], np.float32)
    _close(namespace["log_p"], model.log_prob(x), "float32", "gRPC log_prob")
