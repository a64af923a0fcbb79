"""Conditional MAF on MNIST: p(x | y) for each digit class, samples per class, and the
marginal log p(x) the paper reports.

Run it (``--fast`` is what the tests execute; the full run trains MAF (5) of 1 x 1024
as in the paper, for ``--max-minutes``):

    python tutorials/02_conditional_mnist.py [--fast] [--data-dir DATA]

MNIST is read from ``<data-dir>/mnist/mnist.pkl.gz``; without ``--data-dir`` the root is
``$TFP_MAF_DATA``, else ``~/.tfp_maf/data``. Where that file is missing, ``--fast`` goes on
with random images of MNIST's shape, so that the smoke run needs no download. The paper's
preprocessing: dequantize, scale to [0, 1], logit-transform with lambda = 1e-6; the
densities are in logit space, and bits per pixel translate them back to pixel space
(appendix E). The samples are drawn to a PNG with matplotlib, from the paper extra:
``pip install "tfp-maf[paper]"``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import keras_models as km  # noqa: E402
from keras_models import data, evaluation, figures, training  # noqa: E402
from keras_models.data import images  # noqa: E402


def random_images(n_train: int = 1000, n_eval: int = 200) -> data.Splits:
    """Uniformly random bytes in MNIST's shape, preprocessed as MNIST is: a stand-in for
    the smoke run where the MNIST file is not on disk."""
    rng = np.random.default_rng(0)
    parts = [(rng.integers(0, 256, (n, 784)) / 256.0, rng.integers(0, 10, n)) for n in (n_train, n_eval, n_eval)]
    (x_train, l_train), (x_val, l_val), (x_test, l_test) = images.preprocess_mnist(parts)
    return data.Splits("mnist (random stand-in)", x_train, x_val, x_test, images.one_hot(l_train),
                       images.one_hot(l_val), images.one_hot(l_test), num_classes=10,
                       logit_lambda=images.MNIST_LAMBDA)


def main(fast: bool = False, data_dir=None, max_minutes: float = 20.0, out=None) -> dict:
    keras.utils.set_random_seed(0)
    # 1. Data: x in logit space, y one-hot labels (10 classes).
    try:
        splits = data.load("mnist", data_dir)
    except data.DatasetFileNotFoundError as missing:
        if not fast:
            raise
        print(f"{missing}\n--fast goes on with random images of MNIST's shape.")
        splits = random_images()
    if fast:  # a small slice: the point is to run every step, not to fit
        splits = data.Splits("mnist", splits.x_train[:1000], splits.x_val[:200], splits.x_test[:200],
                             splits.y_train[:1000], splits.y_val[:200], splits.y_test[:200],
                             num_classes=10, logit_lambda=splits.logit_lambda)

    # 2. A conditional MAF: every MADE also takes y as input.
    model = km.MAF(784, hidden_units=[64] if fast else [1024], num_layers=2 if fast else 5, conditional_dims=10)
    training.compile_as_paper(model, "maf5")
    pipelines = splits.pipelines(batch_size=100, conditional=True)  # yields (x, y)
    _, info = training.fit_as_paper(model, pipelines.train, pipelines.validation, splits.x_train, splits.y_train,
                                    max_epochs=1 if fast else 1000, max_minutes=None if fast else max_minutes,
                                    verbose=0, shuffle_epoch=pipelines.epoch)

    # 3. Evaluate as in the paper: the marginal log p(x) = log sum_y p(x | y) p(y),
    #    with p(y) uniform, and bits per pixel.
    log_p = evaluation.marginal_log_likelihoods(model, splits.x_test, num_classes=10)
    mean, two_se = evaluation.mean_and_two_se(log_p)
    bpp, bpp_2se = evaluation.mean_and_two_se(evaluation.bits_per_pixel(log_p, splits.x_test, splits.logit_lambda))
    print(f"test log p(x) {mean:.1f} +- {two_se:.1f} nats ({bpp:.2f} +- {bpp_2se:.2f} bits/pixel); "
          f"{info['epochs']} epochs, early stopping reached: {info['early_stopped']}")

    # 4. Samples: one row per digit, sorted by log-likelihood (the paper's figure).
    target = Path(out or tempfile.mkdtemp()) / "mnist_conditional_samples.png"
    figures.save_class_samples(model, target, splits.logit_lambda, per_class=4 if fast else 10)
    print(f"samples written to {target}")
    return {"test_log_likelihood": mean, "bits_per_pixel": bpp, "samples": str(target)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fast", action="store_true", help="a tiny model on a slice (smoke run)")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--max-minutes", type=float, default=20.0)
    parser.add_argument("--out", default=None, help="folder for the samples figure")
    args = parser.parse_args()
    main(args.fast, args.data_dir, args.max_minutes, args.out)
