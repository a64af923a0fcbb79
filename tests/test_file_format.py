"""Files written by each release load in this one: the same ``log_prob``, and training resumes.

``tests/data/format-<release>/`` holds small models of every zoo family saved by that
release (``tests/scripts/write_format_files.py`` wrote them, with its code), and the
``log_prob`` it computed. A change that renames a layer or weight, moves a config key or
reshapes a kernel fails here, not in a user's reload of a trained model.
"""

from __future__ import annotations

import pathlib

import keras
import numpy as np
import pytest

import keras_models  # noqa: F401  registers the model classes with Keras
import tfp_maf

DATA = pathlib.Path(__file__).parent / "data"
FILES = sorted(DATA.glob("format-*/*.keras"))


def test_every_release_has_its_files():
    # A release writes its files (tests/scripts/write_format_files.py) as its version is set.
    releases = sorted(p.name for p in DATA.glob("format-*"))
    assert {"format-0.3.0", f"format-{tfp_maf.__version__}"} <= set(releases), releases
    for release in releases:
        assert (DATA / release / "log_prob.npz").is_file(), release
        assert len(list((DATA / release).glob("*.keras"))) >= 6, release


def _inputs(path):
    ref = np.load(path.parent / "log_prob.npz")
    conditional = path.stem.endswith("_cond")
    args = (ref["x"], ref["y"]) if conditional else (ref["x"],)
    return ref[path.stem], args


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_a_saved_model_loads_to_the_same_log_prob_and_trains_on(path):
    expected, args = _inputs(path)
    model = keras.saving.load_model(path)
    np.testing.assert_allclose(model.log_prob(*args), expected, rtol=1e-5, atol=1e-5)
    samples = model.sample(2, args[1][:2], seed=0) if len(args) == 2 else model.sample(2, seed=0)
    assert samples.shape == (2, args[0].shape[-1])

    # Adam's state came with the file: the step count goes on from the saved one, and a
    # further epoch is finite.
    steps = int(model.optimizer.iterations.numpy())
    data = tuple(np.tile(a, (5, 1)) for a in args)
    data = data if len(data) == 2 else data[0]
    if not model.trainable_weights:  # the Gaussian is fitted in closed form, not by fit
        with pytest.raises(TypeError, match="fitted in closed form"):
            model.fit(data, batch_size=25, epochs=1, verbose=0)
        return
    history = model.fit(data, batch_size=25, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    assert steps > 0 and int(model.optimizer.iterations.numpy()) == steps + 2


@pytest.mark.parametrize("path", sorted(DATA.glob("format-*/*.weights.h5")),
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_saved_weights_load_into_the_same_architecture(path):
    name = path.name.removesuffix(".weights.h5")
    expected, args = _inputs(path.parent / f"{name}.keras")
    saved = keras.saving.load_model(path.parent / f"{name}.keras")
    model = saved.__class__.from_config(saved.get_config())  # fresh weights
    model.log_prob(*(a[:1] for a in args))  # builds it
    model.load_weights(path)
    np.testing.assert_allclose(model.log_prob(*args), expected, rtol=1e-5, atol=1e-5)
