"""Simulation-based inference: a posterior from simulations alone (neural posterior
estimation), its diagnostics, and a SavedModel that samples and scores it.

Run it (about five minutes on 2 CPU cores; ``--fast`` for a short run, which is what the tests
execute; needs scikit-learn and matplotlib, the ``sbi`` extra):

    python tutorials/07_simulation_based_inference.py [--fast] [--out DIR]

A simulator gives data ``x`` for parameters ``theta`` but no likelihood to write down:
sbibm's *two moons* (`keras_models.sbi.tasks.TwoMoons`), theta in the box [-1, 1]^2. Neural
posterior estimation draws theta from the prior, simulates an x for each, and fits a
conditional flow q(theta | x) by maximum likelihood; q(theta | x_o) is then the posterior
of any observation x_o, with no more simulations (amortised). The script

1. fits a conditional MAF to 10,000 simulations (``--fast``: 1,000 and a few epochs), on
   the logit of theta's place in the box: the posterior is the flow composed with TFP's
   ``tfb.Sigmoid(low, high)``, so no sample falls outside the prior and ``log_prob`` is
   the density of theta itself (the sigmoid's Jacobian included);
2. checks it as SBI users do before trusting it: simulation-based calibration ranks and
   expected coverage (`keras_models.sbi.calibration`), with their plots, and, where sbibm's
   reference files are installed (``pip install --no-deps sbibm==1.1.0``), the C2ST
   against sbibm's reference posterior of its first observation (not with ``--fast``: its
   classifiers would be most of a short run);
3. exports the posterior as a SavedModel with two signatures, ``sample`` (theta given x, n
   and a seed) and ``log_prob`` (of theta given x), and calls them from a process that
   imports TensorFlow only, through `tf.saved_model.load` and through TF Serving's own loader
   (a graph in a session), with no XLA program in it.
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
import tensorflow as tf  # noqa: E402
import tensorflow_probability as tfp  # noqa: E402

import keras_models as km  # noqa: E402
import tfp_maf  # noqa: E402
from keras_models import sbi  # noqa: E402

tfb, tfd = tfp.bijectors, tfp.distributions

#: The flow of theta given x: 5 layers of 2 x 50 tanh units with the paper's batch norm.
FLOW = {"num_layers": 5, "hidden_units": [50, 50], "activation": "tanh"}


def train(task, n: int, fast: bool):
    """A conditional MAF of the logit of theta's place in the prior's box, given x, on
    ``n`` simulations; returns the model and the box bijector."""
    rng = np.random.default_rng(0)
    theta = task.prior_sample(n, rng).astype(np.float32)
    x = task.simulate(theta, rng).astype(np.float32)
    box = tfb.Sigmoid(low=np.float32(task.bounds[0]), high=np.float32(task.bounds[1]))
    keras.utils.set_random_seed(0)
    model = km.MAF(task.theta_dim, conditional_dims=task.x_dim, seed=0, **FLOW)
    model.compile(optimizer=keras.optimizers.Adam(1e-3))
    stop = keras.callbacks.EarlyStopping(patience=20, restore_best_weights=True)
    model.fit(box.inverse(theta).numpy(), x, batch_size=200, epochs=5 if fast else 1_000, validation_split=0.1,
              callbacks=[stop], verbose=0)
    return model, box


def posterior(model, box, x):
    """q(theta | x): the flow's distribution given ``x`` ([K] or [N, K]), onto the box."""
    return tfd.TransformedDistribution(model.distribution(tf.convert_to_tensor(x, tf.float32)), box)


class ServedPosterior(tf.Module):
    """The posterior's two signatures for a SavedModel: TensorFlow alone loads and runs it."""

    def __init__(self, model, box, task):
        super().__init__()
        self.model, self.box = model, box  # the model's variables are tracked, and saved
        spec = tf.TensorSpec
        self.sample = tf.function(self._sample, input_signature=[
            spec([task.x_dim], tf.float32, name="x"), spec([], tf.int32, name="n"), spec([2], tf.int32, name="seed")])
        self.log_prob = tf.function(self._log_prob, input_signature=[
            spec([None, task.theta_dim], tf.float32, name="theta"), spec([None, task.x_dim], tf.float32, name="x")])
        # The tf.Variables the signatures read, tracked as themselves (not only through the
        # Keras variables that wrap them): TF Serving's session loader restores the tracked
        # handles, as `keras_models.export` tracks them for the models' own exports.
        self.read_variables = list({id(v): v for f in (self.sample, self.log_prob)
                                    for v in f.get_concrete_function().variables}.values())

    def _sample(self, x, n, seed):
        # Traced without XLA: TF Serving runs no XLA program unless started with
        # --xla_cpu_compilation_enabled=true (the models' own exports trace so too).
        with tfp_maf.sampling.without_xla():
            return {"theta": posterior(self.model, self.box, x).sample(n, seed=seed)}

    def _log_prob(self, theta, x):
        return {"log_prob": posterior(self.model, self.box, x).log_prob(theta)}


# What a serving process runs: TensorFlow only.
SERVE = """
import json, sys
import numpy as np, tensorflow as tf
served = tf.saved_model.load(sys.argv[1])
x = tf.constant(json.loads(sys.argv[2]), tf.float32)
theta = served.signatures["sample"](x=x, n=tf.constant(1000), seed=tf.constant([1, 2]))["theta"]
log_p = served.signatures["log_prob"](theta=theta[:5], x=tf.repeat(x[None], 5, axis=0))["log_prob"]
# TF Serving's and saved_model_cli's loader: a graph in a session, the variables restored from
# the SavedModel's checkpoint (a variable the module does not track is missing there).
rows, conditions = theta[:5].numpy(), np.repeat(x.numpy()[None], 5, axis=0)
with tf.compat.v1.Session(graph=tf.Graph()) as session:
    signatures = tf.compat.v1.saved_model.loader.load(session, ["serve"], sys.argv[1]).signature_def
    scoring, sampling = signatures["log_prob"], signatures["sample"]
    feeds = {scoring.inputs["theta"].name: rows, scoring.inputs["x"].name: conditions}
    in_session = session.run(scoring.outputs["log_prob"].name, feeds)
    feeds = {sampling.inputs["x"].name: x.numpy(), sampling.inputs["n"].name: 1000,
             sampling.inputs["seed"].name: [1, 2]}
    drawn_in_session = session.run(sampling.outputs["theta"].name, feeds)

# A function XLA must compile fails in TF Serving, which runs no XLA unless told to.
from tensorflow.core.protobuf import saved_model_pb2
saved = saved_model_pb2.SavedModel.FromString(open(sys.argv[1] + "/saved_model.pb", "rb").read())
xla = [f.signature.name for f in saved.meta_graphs[0].graph_def.library.function if f.attr["_XlaMustCompile"].b]
print(json.dumps({"theta": theta.numpy().tolist(), "log_prob": log_p.numpy().tolist(), "xla_functions": len(xla),
                  "session_log_prob": in_session.tolist(), "session_theta": drawn_in_session.tolist(),
                  "imported": sorted(m for m in ("tfp_maf", "keras_models", "tensorflow_probability")
                                     if m in sys.modules)}))
"""


def diagnostics(model, box, task, fast: bool, out: Path) -> dict:
    """SBC ranks and expected coverage on fresh simulations, and their plots."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pairs, draws = (20, 19) if fast else (200, 99)
    theta = task.prior_sample(pairs, rng=10)
    x = task.simulate(theta, rng=11)

    # Traced once each, then run for every simulation: eager calls would rebuild the flow.
    sample = tf.function(lambda x_o, n, seed: posterior(model, box, x_o).sample(n, seed=seed))
    density = tf.function(lambda theta_, x_o: posterior(model, box, x_o).log_prob(theta_))

    def sample_posterior(x_o, n, seed):
        return sample(tf.constant(x_o, tf.float32), n, tf.constant([seed, 0])).numpy()

    def log_prob(theta_, x_o):
        return density(tf.constant(theta_, tf.float32), tf.constant(x_o, tf.float32)).numpy()

    ranks = sbi.sbc_ranks(sample_posterior, theta, x, num_posterior_samples=draws)
    levels, coverage = sbi.expected_coverage(sample_posterior, log_prob, theta, x, num_posterior_samples=draws)
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.2))
    sbi.plot_sbc_ranks(ranks, num_posterior_samples=draws, ax=axes[:2], names=["theta_1", "theta_2"])
    sbi.plot_coverage(levels, coverage, num_draws=pairs, ax=axes[2], label="MAF (5)")
    fig.tight_layout()
    fig.savefig(out / "calibration.png", dpi=120)
    plt.close(fig)
    return {"coverage_gap": float(np.max(np.abs(coverage - levels))), "pairs": pairs}


def picture(samples, x_o, path: Path, reference=None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4, 4))
    ax.scatter(samples[:, 0], samples[:, 1], s=2, alpha=0.3, label="MAF (5) posterior")
    if reference is not None:  # on top, thinner: the posterior's samples would hide it
        ax.scatter(reference[:, 0], reference[:, 1], s=1, alpha=0.15, color="black", label="sbibm's reference")
    ax.set(xlim=(-1, 1), ylim=(-1, 1), xlabel="theta_1", ylabel="theta_2", title=f"x_o = {np.round(x_o, 3)}")
    ax.legend(loc="lower left", markerscale=4)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(fast: bool = False, out: str | None = None) -> dict:
    task = sbi.get("two_moons")
    model, box = train(task, 1_000 if fast else 10_000, fast)
    try:  # sbibm's first observation and its reference posterior, where sbibm's files are
        from keras_models.sbi import reference

        x_o, ref = reference.observation(task, 1), reference.posterior_samples(task, 1)
    except reference.MissingReferenceFiles:
        x_o, ref = task.simulate(np.zeros((1, 2)), rng=5)[0], None
    x_o = np.asarray(x_o, np.float32)
    samples = posterior(model, box, x_o).sample(10_000, seed=0).numpy()
    result = {"outside_prior": int(np.sum(np.any(np.abs(samples) > 1, axis=1)))}
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(out or tmp)
        where.mkdir(parents=True, exist_ok=True)
        picture(samples, x_o, where / "posterior.png", ref)
        result.update(diagnostics(model, box, task, fast, where))
        if ref is not None and not fast:  # sbibm scores 10,000 against 10,000: minutes
            result["c2st"] = float(sbi.c2st(ref, samples))
        saved = where / "posterior_saved_model"
        module = ServedPosterior(model, box, task)
        tf.saved_model.save(module, str(saved), signatures={"sample": module.sample, "log_prob": module.log_prob})
        served = subprocess.run([sys.executable, "-c", SERVE, str(saved), json.dumps(x_o.tolist())], check=True,
                                capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ""})
    served = json.loads(served.stdout.strip().splitlines()[-1])
    theta = np.asarray(served["theta"], np.float32)
    here = posterior(model, box, np.repeat(x_o[None], 5, 0)).log_prob(theta[:5]).numpy()
    in_session = np.asarray(served["session_theta"], np.float32)
    result.update(served_outside_prior=int(np.sum(np.any(np.abs(np.concatenate([theta, in_session])) > 1, axis=1))),
                  session_samples=len(in_session), served_xla_functions=served["xla_functions"],
                  served_log_prob_matches=bool(np.allclose(served["log_prob"], here, atol=1e-4)
                                               and np.allclose(served["session_log_prob"], here, atol=1e-4)),
                  served_imports=served["imported"])
    print(f"posterior of x_o = {np.round(x_o, 3)}: {len(samples):,} samples, "
          f"{result['outside_prior']} outside the prior")
    print(f"expected coverage within {result['coverage_gap']:.2f} of the diagonal over {result['pairs']} simulations")
    if "c2st" in result:
        print(f"C2ST against sbibm's reference posterior: {result['c2st']:.3f} (0.5: indistinguishable)")
    print(f"served by TensorFlow alone (tf.saved_model.load, and TF Serving's session loader): log_prob matches "
          f"{result['served_log_prob_matches']}, {result['served_outside_prior']} of 2 x 1,000 samples outside "
          "the prior")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fast", action="store_true", help="1,000 simulations and a few epochs (what the tests run)")
    parser.add_argument("--out", default=None, help="keep the plots and the SavedModel here")
    main(**vars(parser.parse_args()))
