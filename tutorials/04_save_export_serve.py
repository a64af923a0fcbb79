"""Saving, exporting and serving a trained model.

Run it (``--fast`` is what the tests execute; both take well under a minute):

    python tutorials/04_save_export_serve.py [--fast]

Three formats, three uses:

1. ``model.save("x.keras")``: the whole Keras model (architecture, weights, optimizer
   state), to go on training or evaluating in Python with tfp_maf installed.
2. ``model.export(dir)`` (Keras' own call): a TensorFlow SavedModel for TF Serving or
   any process that has TensorFlow only. ``serve`` is the model's call (log p per row),
   as Keras writes it, so ``keras.layers.TFSMLayer(dir)`` reloads it as a layer; beside
   it, ``log_prob`` and ``sample`` (the mask-aware sampler is traced into it).
3. ``tfp-maf export --out RUN``: the same from the command line.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import keras_models as km  # noqa: E402
from keras_models import data, training  # noqa: E402

# What a serving process runs: TensorFlow only, no tfp_maf, no keras_models.
SERVE = """
import json, sys
import tensorflow as tf
served = tf.saved_model.load(sys.argv[1])
x = tf.constant([[0.0, 0.0], [4.0, 4.0]])
print(json.dumps({
    "log_prob": served.serve(x).numpy().tolist(),
    "log_prob_endpoint_agrees": bool(tf.reduce_all(served.log_prob(x) == served.serve(x))),
    "sample_shape": served.sample(tf.constant(10_000), tf.constant([1, 2])).shape.as_list(),
    "tfp_maf_imported": "tfp_maf" in sys.modules,
}))
"""


def main(fast: bool = False) -> dict:
    keras.utils.set_random_seed(0)
    splits = data.load_figure1(n_train=2_000 if fast else 10_000)
    pipelines = splits.pipelines(batch_size=100)
    model = training.compile_as_paper(km.MAF(2, hidden_units=[32, 32] if fast else [100, 100]), "maf5")
    training.fit_as_paper(model, pipelines.train, pipelines.validation, splits.x_train,
                          max_epochs=3 if fast else 1000, verbose=0, shuffle_epoch=pipelines.epoch)

    with tempfile.TemporaryDirectory() as tmp:
        # 1. The Keras file: reload it and keep training, or evaluate.
        keras_file = Path(tmp) / "maf5.keras"
        model.save(keras_file)
        again = keras.saving.load_model(keras_file, safe_mode=True)
        x = splits.x_test[:2]
        print("reloaded .keras gives the same log_prob:", np.allclose(again.log_prob(x), model.log_prob(x)))

        # 2. The SavedModel, served by a process that imports TensorFlow only.
        saved = Path(tmp) / "saved_model"
        model.export(str(saved))
        reloaded = keras.layers.TFSMLayer(str(saved))  # Keras' reload of the `serve` endpoint
        print("TFSMLayer gives the same log_prob:", np.allclose(reloaded(x), model.log_prob(x), atol=1e-5))
        done = subprocess.run([sys.executable, "-c", SERVE, str(saved)], capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": ""}, check=True)
        served = json.loads(done.stdout.strip().splitlines()[-1])
    expected = model.log_prob(np.array([[0.0, 0.0], [4.0, 4.0]], np.float32)).numpy()
    print("served log_prob:", np.round(served["log_prob"], 4), "in Python:", np.round(expected, 4))
    print("served sample of 10,000:", served["sample_shape"], "| tfp_maf imported:", served["tfp_maf_imported"])
    return {**served, "matches": bool(np.allclose(served["log_prob"], expected, atol=1e-4))}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fast", action="store_true", help="a few epochs only (smoke run)")
    result = main(parser.parse_args().fast)
    print(json.dumps(result))
