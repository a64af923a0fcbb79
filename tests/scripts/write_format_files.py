"""Writes the saved files that `tests/test_file_format.py` loads: a release's file format.

Run it with a release's code and the directory named after that release, e.g. from a
checkout of 0.3.0 (``PYTHONPATH`` pointing at it)::

    python tests/scripts/write_format_files.py tests/data/format-0.3.0

For each model family of the zoo (small: three variables, a few units) it trains two epochs
with ``compile_as_paper`` (so the file holds Adam's state), sets the batch norms' training-set
statistics, and writes ``NAME.keras``, and for one model ``NAME.weights.h5``, beside
``log_prob.npz``: the inputs and each model's ``log_prob`` of them. (The blocked MAF was
added to 0.4.0's files later, written by this script from 0.4.0's code.) Later releases must read
these files to the same ``log_prob`` and resume training from them.
"""

import pathlib
import sys

import numpy as np

import keras_models as km
from keras_models import training

# name: (class, keywords, conditional)
CASES = {
    "gaussian": (km.Gaussian, {}, False),
    "made": (km.MADE, dict(hidden_units=[8]), False),
    "made_mog_cond": (km.MADEMoG, dict(hidden_units=[8], num_components=3, conditional_dims=4), True),
    "maf_cond": (km.MAF, dict(hidden_units=[8, 8], num_layers=2, conditional_dims=4), True),
    "maf_mog": (km.MAFMoG, dict(hidden_units=[8], num_layers=2, num_components=3), False),
    "realnvp_cond": (km.RealNVP, dict(hidden_units=[8], num_layers=2, conditional_dims=4), True),
}
if hasattr(km, "NSF"):  # from 0.4.0
    CASES["nsf"] = (km.NSF, dict(hidden_units=[8], num_layers=2, bins=4), False)
    # The published code's protocol (`tfp-maf reproduce --protocol published`).
    published = dict(initialization="published", conditional_input_layers="first_layer",
                     scale_parameterization="log_precision")
    CASES["maf_mog_published_cond"] = (km.MAFMoG, dict(
        hidden_units=[8, 8], num_layers=2, num_components=3, conditional_dims=4, **published), True)
if hasattr(km.MAF(3), "kernel_blocks"):
    # The MADEs' kernels in degree blocks, as "auto" stores large ones on a CPU.
    CASES["maf_blocked_cond"] = (km.MAF, dict(hidden_units=[16, 12], num_layers=2, conditional_dims=4,
                                              kernel_blocks=3), True)
WEIGHTS_ONLY = ("maf_cond", "maf_blocked_cond")


def main(out: pathlib.Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((200, 3)).astype(np.float32)
    if hasattr(km.MAF(3), "standardization"):  # from 0.5.0: columns in units of their own
        x = x * np.float32([1e3, 1.0, 1e-2]) + np.float32([1e5, 0.0, 5.0])
    y = np.eye(4, dtype=np.float32)[np.arange(200) % 4]
    log_probs = {}
    for name, (cls, kwargs, conditional) in CASES.items():
        model = cls(3, **kwargs)
        training.compile_as_paper(model, jit_compile=False)
        inputs = (x, y) if conditional else (x,)
        if not model.fit_in_closed_form(*inputs):  # the Gaussian refuses Keras' fit from 0.5.0
            model.fit(inputs if conditional else x, batch_size=50, epochs=2, verbose=0)
        model.set_batch_norm_statistics(*inputs)
        log_probs[name] = np.asarray(model.log_prob(*(a[:10] for a in inputs)))
        model.save(out / f"{name}.keras")
        if name in WEIGHTS_ONLY:
            model.save_weights(out / f"{name}.weights.h5")
    np.savez(out / "log_prob.npz", x=x[:10], y=y[:10], **log_probs)


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]))
