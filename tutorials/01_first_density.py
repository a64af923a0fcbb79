"""A first density in five minutes: MAF (5) on the paper's Figure 1 density.

Run it (about 1.5 minutes on 2 CPU cores; ``--fast`` for a 10-second smoke run, which
is what the tests execute):

    python tutorials/01_first_density.py [--fast]

The target is p(x1, x2) = N(x2 | 0, 4) N(x1 | x2^2 / 4, 1). Its exact expected
log-likelihood is -3.531 nats, so a model within ~0.05 of it has learned the density;
a single MADE with order (x1, x2) cannot (Figure 1 of the paper).
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
from keras_models import data, evaluation, training  # noqa: E402


def main(fast: bool = False) -> dict:
    # 1. Data: train / validation / test arrays, and tf.data pipelines over them.
    splits = data.load_figure1(n_train=2_000 if fast else 10_000)
    train, val, *_ = splits.pipelines(batch_size=100)

    # 2. The model: D first, then keywords. A batch norm follows each MADE; the first
    #    MADE uses the data's order and each next one reverses it.
    model = km.MAF(2, hidden_units=[100, 100], num_layers=5)

    # 3. Train as in the paper: Adam at 1e-4, early stopping after 30 epochs without a
    #    better validation log-likelihood, best weights restored, batch-norm statistics
    #    set from the whole training set.
    training.compile_as_paper(model, "maf5")
    _, info = training.fit_as_paper(model, train, val, splits.x_train,
                                    max_epochs=3 if fast else 1000, verbose=0)

    # 4. Evaluate as in the paper: mean test log-likelihood +- 2 standard errors.
    mean, two_se = evaluation.mean_and_two_se(evaluation.log_likelihoods(model, splits.x_test))
    print(f"test log-likelihood {mean:.3f} +- {two_se:.3f} nats (exact: -3.531), {info['epochs']} epochs")

    # 5. Sample, and check that the samples look like the data: x1 ~ x2^2 / 4.
    x = model.sample(5_000, seed=0).numpy()
    residual = x[:, 0] - x[:, 1] ** 2 / 4
    print(f"samples: x1 - x2^2/4 has mean {residual.mean():.2f} and std {residual.std():.2f} (target 0, 1)")

    # 6. Save and load: the reloaded model gives the same log-likelihoods.
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "maf5.keras"
        model.save(path)
        again = keras.saving.load_model(path, safe_mode=True)
        same = np.allclose(again.log_prob(splits.x_test[:100]), model.log_prob(splits.x_test[:100]))
    print(f"reloaded model gives the same log_prob: {same}")
    return {"test_log_likelihood": mean, "two_se": two_se, "reload_equal": bool(same),
            "sample_residual_std": float(residual.std())}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fast", action="store_true", help="a few epochs only (smoke run)")
    main(parser.parse_args().fast)
