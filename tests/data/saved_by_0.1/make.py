"""Writes the files in this folder; run once, with tfp-maf 0.1.0 (commit 5930bba).

tfp-maf 0.1 named its layers `MADE` and `ExpGammaBatchNormalization`, and Keras 3
stores a layer's weights under its class name: these files keep the old paths so
that `tests/test_saved_files.py` checks that they still load, with the same
log-densities, after the layers were renamed.
"""

import json
import pathlib

import numpy as np

from keras_models import MAF, MADEMoG, RealNVP

HERE = pathlib.Path(__file__).parent


def main():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4, 3)).astype("float32")
    y = np.eye(2, dtype="float32")[[0, 1, 0, 1]]
    models = {
        "maf": MAF(3, hidden_units=[8], num_layers=2, seed=1),
        "maf_conditional": MAF(3, hidden_units=[8], num_layers=2, conditional_dims=2, seed=2),
        "made_mog": MADEMoG(3, hidden_units=[8], num_components=2, seed=3),
        "realnvp": RealNVP(3, hidden_units=[8], num_layers=2, seed=4),
    }
    expected = {"x": x.tolist(), "y": y.tolist()}
    for name, model in models.items():
        cond = model.conditional_dims is not None
        model.compile(optimizer="adam")
        model.fit(x, y if cond else None, epochs=1, batch_size=4, verbose=0)  # weights and Adam state
        model.set_batch_norm_statistics(x, y if cond else None)
        model.save(HERE / f"{name}.keras")
        model.save_weights(HERE / f"{name}.weights.h5")
        expected[name] = model.log_prob(x, y if cond else None).numpy().tolist()
    (HERE / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")


if __name__ == "__main__":  # not on import: pytest's doctest collection imports every module
    main()
