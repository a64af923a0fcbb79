"""Your own table: a MAF on scikit-learn's breast cancer table, in its raw units, as an
anomaly detector.

Run it (about two minutes on 2 CPU cores; ``--fast`` for a short run, which is what the
tests execute; needs scikit-learn and matplotlib):

    python tutorials/06_own_table.py [--fast] [--out DIR]

The table (569 tumours, 30 measurements in their own units: areas near 1,000, smoothness
near 0.1) ships with scikit-learn, so it runs offline. The flow learns the density of the
benign tumours from the raw columns (it standardises them itself); a malignant tumour is an
anomaly, and ``-log p(x)`` its score. The script trains from the command line and from
Keras, scores held-out rows, samples, draws the samples against the data, and ranks the
anomalies beside scikit-learn's GaussianMixture, KernelDensity and IsolationForest on the
same split (ROC AUC: 1 ranks every malignant tumour above every benign one).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.datasets import load_breast_cancer  # noqa: E402
from sklearn.ensemble import IsolationForest  # noqa: E402
from sklearn.metrics import roc_auc_score  # noqa: E402
from sklearn.mixture import GaussianMixture  # noqa: E402
from sklearn.neighbors import KernelDensity  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402

import keras_models as km  # noqa: E402


def split(seed: int = 0):
    """Benign rows for training (two thirds of them); the held-out benign rows and every
    malignant one to score."""
    table = load_breast_cancer()
    x, malignant = table.data.astype(np.float32), table.target == 0
    names = [name.replace(" ", "_") for name in table.feature_names]
    benign = np.flatnonzero(~malignant)
    order = np.random.default_rng(seed).permutation(benign)
    train = order[: 2 * len(order) // 3]
    test = np.concatenate([order[2 * len(order) // 3:], np.flatnonzero(malignant)])
    return names, x[train], x[test], malignant[test]


def from_the_command_line(names, x_train, x_test, out: Path, fast: bool) -> np.ndarray:
    """``tfp-maf train --data`` on a CSV of the training rows, then ``tfp-maf score``."""
    def write(path, rows):
        path.write_text(",".join(names) + "\n" + "\n".join(",".join(repr(float(v)) for v in row) for row in rows))

    write(out / "benign.csv", x_train)
    write(out / "to_score.csv", x_test)
    command = [sys.executable, "-m", "tfp_maf_cli"]
    epochs = ["--max-epochs", "3"] if fast else []
    subprocess.run([*command, "train", "--data", str(out / "benign.csv"), "--model", "maf5", "--hidden-units", "64",
                    "64", "--learning-rate", "1e-3", "--out", str(out / "run"), "--restart", "--quiet", *epochs],
                   check=True, stdout=subprocess.DEVNULL)
    scored = subprocess.run([*command, "score", "--out", str(out / "run"), "--data", str(out / "to_score.csv")],
                            check=True, capture_output=True, text=True)
    return np.array([float(line) for line in scored.stdout.splitlines()[1:]])


def from_keras(x_train, fast: bool):
    """The same MAF from Keras: raw arrays in, early stopping on a validation split."""
    keras.utils.set_random_seed(0)
    model = km.MAF(x_train.shape[1], num_layers=5, hidden_units=[64, 64])
    model.compile(optimizer=keras.optimizers.Adam(1e-3))
    stop = keras.callbacks.EarlyStopping(patience=20, restore_best_weights=True)
    model.fit(x_train, batch_size=32, epochs=3 if fast else 300, validation_split=0.2, callbacks=[stop], verbose=0)
    return model


def baselines(x_train, x_test, seed: int = 0) -> dict:
    """scikit-learn's density and outlier scores of the test rows (higher: more normal),
    each on standardised columns, as they need."""
    scaler = StandardScaler().fit(x_train)
    a, b = scaler.transform(x_train), scaler.transform(x_test)
    mixture = GaussianMixture(3, covariance_type="full", random_state=seed)
    return {
        "GaussianMixture (3, full)": mixture.fit(a).score_samples(b),
        "KernelDensity (bandwidth 1)": KernelDensity(bandwidth=1.0).fit(a).score_samples(b),
        "IsolationForest": IsolationForest(random_state=seed).fit(a).score_samples(b),
    }


def picture(model, x_train, names, path: Path) -> None:
    """Samples against the training rows, on two of the columns."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = model.sample(len(x_train), seed=0).numpy()
    i, j = names.index("mean_radius"), names.index("mean_texture")
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.5), sharex=True, sharey=True)
    for ax, rows, title in ((axes[0], x_train, "benign tumours"), (axes[1], samples, "MAF (5) samples")):
        ax.scatter(rows[:, i], rows[:, j], s=4, alpha=0.6)
        ax.set_title(title)
        ax.set_xlabel(names[i])
    axes[0].set_ylabel(names[j])
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(fast: bool = False, out: str | None = None) -> dict:
    names, x_train, x_test, malignant = split()
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(out or tmp)
        where.mkdir(parents=True, exist_ok=True)
        cli_scores = from_the_command_line(names, x_train, x_test, where, fast)
        model = from_keras(x_train, fast)
        log_p = model.log_prob(x_test).numpy()
        picture(model, x_train, names, where / "samples.png")
    held_out = float(np.mean(log_p[~malignant]))
    # -log p is the anomaly score; the baselines' scores are "normality", negated alike.
    auc = {"MAF (5), Keras": roc_auc_score(malignant, -log_p),
           "MAF (5), tfp-maf score": roc_auc_score(malignant, -cli_scores)}
    auc.update({name: roc_auc_score(malignant, -score) for name, score in baselines(x_train, x_test).items()})
    print(f"held-out benign log-likelihood {held_out:.1f} nats (raw units); every score finite: "
          f"{bool(np.all(np.isfinite(log_p)))}")
    print("ROC AUC, malignant as the anomaly:")
    for name, value in auc.items():
        print(f"  {name:30s} {value:.3f}")
    result = {"held_out_log_likelihood": held_out, "roc_auc": auc, "finite": bool(np.all(np.isfinite(log_p)))}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fast", action="store_true", help="a few epochs (what the tests run)")
    parser.add_argument("--out", default=None, help="keep the CSV files, the run and samples.png here")
    main(**vars(parser.parse_args()))
