"""What reading the MADEs' kernels as stored buys `fit`: the default step against the
same model trained through the ``kernel * mask`` products.

`MaskedDense` multiplies each kernel by its mask on every call, a product that changes
no value (the kernels hold zeros outside their masks) but masks the gradient for any
training loop. `DensityModel.train_step` reads the kernels as stored instead and masks
the gradients after the tape (`tfp_maf.layers.kernels_as_stored`), where XLA fuses the
mask into Adam's update. This script trains MAF (5) both ways on N(0, I) data, on the
path users take (`compile_as_paper`, then `model.fit`), the two interleaved round by
round; the other way is a `train_step` as a user writes it, a plain `GradientTape`
step through the products.

    python benchmarks/mask_products.py
    python benchmarks/mask_products.py --rounds 2   # a smoke run

Writes benchmarks/results/mask_products/<machine kind>.json and .md (`_common.report`).
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from _common import fit_rounds, header, report, run_info, whole_executions  # noqa: E402

import keras_models as km  # noqa: E402
from keras_models import data, training  # noqa: E402

#: (name, D, hidden units, batch, steps a timed `fit` call): about a second each.
CASES = (("A", 43, [512, 512], 100, 200), ("A", 43, [512, 512], 1000, 20),
         ("MNIST", 784, [1024], 100, 40), ("MNIST", 784, [1024], 1000, 10))


class _ThroughProducts(km.MAF):
    """MAF (5) whose `fit` step is a plain tape step: the products mask the gradients."""

    def train_step(self, x):
        with tf.GradientTape() as tape:
            nll = -tf.reduce_mean(self.log_prob(x, training=True))
            total = nll + tf.add_n(self.losses)
        self.optimizer.apply(tape.gradient(total, self.trainable_variables), self.trainable_variables)
        self.loss_tracker.update_state(nll)
        return self._logs()


def case_times(D, hidden, batch, steps, rounds) -> dict:
    x = np.random.default_rng(0).standard_normal((batch * steps, D)).astype(np.float32)
    ds = data.array_dataset(x, batch_size=batch, shuffle=True, seed=0).repeat()
    models = {}
    for name, cls in (("as stored", km.MAF), ("products", _ThroughProducts)):
        model = training.compile_as_paper(cls(D, hidden_units=hidden, num_layers=5, seed=0), "maf5")
        steps = whole_executions(steps, int(model.steps_per_execution))
        model.fit(ds, steps_per_epoch=int(model.steps_per_execution), epochs=1, verbose=0)  # compile
        models[name] = model
    return fit_rounds(models, ds, steps, rounds)


def markdown(result) -> str:
    lines = [
        header(result, "MAF (5) `fit` with the kernels read as stored against the mask products "
               "(`benchmarks/mask_products.py`)"),
        f"`fit` after `compile_as_paper` (XLA), medians of {result['rounds']} interleaved rounds; kernels as "
        "'auto' stores them.",
        "",
        "| case | ms per step, as stored (min) | through the products (min) | speed-up | host steal |",
        "|---|---|---|---|---|",
    ]
    for c in result["cases"]:
        new, old = c["times"]["as stored"], c["times"]["products"]
        lines.append(
            f"| {c['name']}, batch {c['batch']} | {new['ms_per_step']:.2f} ({new['min_ms_per_step']:.2f}) "
            f"| {old['ms_per_step']:.2f} ({old['min_ms_per_step']:.2f}) "
            f"| {old['ms_per_step'] / new['ms_per_step']:.2f}x "
            f"| {100 * max(new['host_steal'], old['host_steal']):.0f}% |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", default=None, help="the .json to write (default: see above)")
    args = parser.parse_args(argv)
    cases = []
    for name, D, hidden, batch, steps in CASES:
        times = case_times(D, hidden, batch, steps, args.rounds)
        cases.append({"name": name, "D": D, "hidden": hidden, "batch": batch, "times": times})
        print(f"{name} b{batch}: " + ", ".join(f"{k} {t['ms_per_step']:.2f} ms" for k, t in times.items()), flush=True)
    result = {**run_info(__file__, argv), "rounds": args.rounds, "cases": cases}
    return report("mask_products", result, markdown, args.out)


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
