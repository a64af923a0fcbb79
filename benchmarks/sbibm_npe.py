"""Neural posterior estimation on sbibm's tasks: tfp-maf's conditional MAF and NSF beside
sbi's NPE, on the same simulations, scored by the same C2ST against sbibm's reference
posteriors.

    python benchmarks/sbibm_npe.py                  # the whole table; resumes where it stopped
    python benchmarks/sbibm_npe.py --tasks two_moons --budgets 1000 --observations 1
    python benchmarks/sbibm_npe.py --table          # the table of what is done, nothing run
    python benchmarks/sbibm_npe.py --plots          # each task's posterior plot, for the docs

Every cell (task, budget, method, observation) is one line of
``benchmarks/results/sbibm_npe.jsonl`` as soon as it is scored: the C2ST of 10,000 posterior
samples against sbibm's 10,000 reference samples (sbibm's protocol,
`keras_models.sbi.c2st`), the training time of the method's one amortised posterior for
that task and budget, and its sampling time. A later run of the same command skips the cells
there, so a run stopped at any point goes on where it was (a method's posterior is trained
again for the observations it still lacks: the simulations and seeds are fixed). The first
1,000 posterior samples of observation 1 are kept too (``results/sbibm_npe_samples/``), from
which ``--plots`` draws each task's posterior, at its largest budget done, against sbibm's
reference samples (``docs/assets/sbibm_<task>.png``).

The methods, each trained by maximum likelihood of theta given x on the budget's
simulations, 10% held out for early stopping (20 epochs without improvement, the best
weights kept), batch 200 (sbi's defaults, taken for all of them):

- ``maf``, ``nsf``: ``keras_models.MAF`` / ``NSF`` of 5 layers of 2 x 50 tanh units
  (`FLOWS`: no batch norm), Adam at 1e-3, conditional on x; ``maf_bn``, the same MAF with
  the paper's batch norm between its layers (the model's default);
  theta and x standardised by the models (their default). A box prior's
  theta is learnt through the logit of its position in the box and sampled through the
  sigmoid back (`tfp.bijectors.Sigmoid` with the box's ``low`` and ``high``), so that no
  posterior sample falls outside the prior's support.
- ``sbi``: sbi's ``NPE`` with its default density estimator (a MAF of 5 layers of 50
  units, through nflows), its z-scoring and training defaults (Adam at 5e-4); its posterior rejects the
  samples outside a box prior.

Needs the bench extra's torch and ``pip install sbi``, and sbibm's reference files
(``pip install --no-deps sbibm==1.1.0``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from keras_models.sbi import reference, tasks  # noqa: E402
from keras_models.sbi.c2st import c2st  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "sbibm_npe.jsonl"
SAMPLES = RESULTS.parent / "sbibm_npe_samples"
PLOTS = Path(__file__).resolve().parents[1] / "docs" / "assets"
KEPT_SAMPLES = 1_000
TASKS = ["two_moons", "gaussian_linear", "slcp", "gaussian_mixture"]
BUDGETS = [1_000, 10_000, 100_000]
METHODS = ["maf", "maf_bn", "nsf", "sbi"]
#: NPE's mean C2ST over the 10 observations, sbibm's published results
#: (sbi-benchmark/results, benchmarking_sbi/results/main_paper.csv), by budget.
PUBLISHED = {
    "two_moons": {1_000: 0.725, 10_000: 0.606, 100_000: 0.542},
    "gaussian_linear": {1_000: 0.694, 10_000: 0.552, 100_000: 0.506},
    "slcp": {1_000: 0.975, 10_000: 0.901, 100_000: 0.831},
    "gaussian_mixture": {1_000: 0.731, 10_000: 0.661, 100_000: 0.555},
}
BATCH, LEARNING_RATE, PATIENCE, HELD_OUT = 200, 5e-4, 20, 0.1
#: tfp-maf's flows: tanh networks (as sbi's MAF has), at Adam 1e-3. Chosen on two_moons at
#: 10^3 simulations, observations 1-3, C2ST of 2,000 samples: MAF with ReLU 0.94 (batch norm)
#: and 0.97 (none), with tanh 0.70 at 5e-4 and 0.69 at 1e-3 (0.76 at batch 100, 0.76 without
#: batch norm); NSF with tanh 0.82 (batch norm, 5e-4) and 0.71 (none, 1e-3). At 10^4
#: simulations the MAF with batch norm stopped after 30 epochs (a validation loss of 0.92 nats,
#: where batch norm uses its stored statistics, against a training loss of 0.34, where it uses
#: the batch's) and scored 0.80 to 0.87 on observations 1-4; without it the same MAF trained
#: 231 epochs to a validation loss of -0.68. Both flows go without batch norm. (The stop was
#: the stored statistics' fault, since fixed: with batch norm the MAF now trains 220 epochs at
#: 10^4, to a validation loss of -0.47, and scores 0.56 to 0.65 on observations 1-4 with a C2ST
#: of 2,000 samples; ``maf_bn`` is that MAF, scored as every method is. The cells done stay as
#: they were run.)
FLOWS = {"maf": {"activation": "tanh", "batch_norm": False}, "nsf": {"activation": "tanh", "batch_norm": False},
         "maf_bn": {"activation": "tanh", "batch_norm": True}}
FLOW_LEARNING_RATE = 1e-3


def simulations(task, budget: int) -> tuple[np.ndarray, np.ndarray]:
    """The budget's (theta, x), the same for every method and every run."""
    rng = np.random.default_rng([TASKS.index(task.name), budget])
    theta = task.prior_sample(budget, rng)
    return theta.astype(np.float32), task.simulate(theta, rng).astype(np.float32)


# ------------------------------------------------------------------------------- tfp-maf

def _box_bijector(task):
    """theta = low + (high - low) sigmoid(z): the real line onto the prior's box."""
    import tensorflow_probability as tfp

    tfb = tfp.bijectors
    low, high = (np.asarray(b, np.float32) for b in task.bounds)
    return tfb.Sigmoid(low=low, high=high)


def train_tfp_maf(method: str, task, theta, x, seed: int = 0):
    """A `keras_models` flow of theta given x, fitted as sbi fits its own; returns a
    function ``sample(x_o, n, seed) -> [n, theta_dim]``."""
    import keras

    import keras_models as km

    keras.utils.set_random_seed(seed)
    box = _box_bijector(task) if task.bounds is not None else None
    target = theta if box is None else box.inverse(theta).numpy()
    family = {"maf": km.MAF, "maf_bn": km.MAF, "nsf": km.NSF}[method]
    model = family(task.theta_dim, hidden_units=[50, 50], num_layers=5, conditional_dims=task.x_dim, seed=seed,
                   **FLOWS[method])
    model.compile(optimizer=keras.optimizers.Adam(FLOW_LEARNING_RATE))
    model.fit(target, x, batch_size=BATCH, epochs=100_000, validation_split=HELD_OUT, verbose=0,
              callbacks=[keras.callbacks.EarlyStopping(patience=PATIENCE, restore_best_weights=True)])

    def sample(x_o, n, seed):
        z = model.sample(n, y=np.asarray(x_o, np.float32), seed=seed)
        return (z if box is None else box.forward(z)).numpy()

    return sample


# ------------------------------------------------------------------------------- sbi

def _torch_prior(task):
    import torch
    from sbi.utils import BoxUniform

    if task.bounds is not None:
        low, high = (torch.as_tensor(b, dtype=torch.float32) for b in task.bounds)
        return BoxUniform(low=low, high=high)
    covariance = task.prior_variance * torch.eye(task.theta_dim)
    return torch.distributions.MultivariateNormal(torch.zeros(task.theta_dim), covariance)


def train_sbi(task, theta, x, seed: int = 0):
    """sbi's NPE with its defaults (and sbi's own batch size, step size, held-out share
    and patience, which the tfp-maf methods take); returns ``sample(x_o, n, seed)``."""
    import torch
    from sbi.inference import NPE

    torch.manual_seed(seed)
    inference = NPE(prior=_torch_prior(task), show_progress_bars=False)
    inference.append_simulations(torch.as_tensor(theta), torch.as_tensor(x))
    inference.train(training_batch_size=BATCH, learning_rate=LEARNING_RATE,
                    validation_fraction=HELD_OUT, stop_after_epochs=PATIENCE)
    posterior = inference.build_posterior()

    def sample(x_o, n, seed):
        torch.manual_seed(seed)
        x_o = torch.as_tensor(np.asarray(x_o, np.float32))[None]
        return posterior.sample((n,), x=x_o, show_progress_bars=False).numpy()

    return sample


# ------------------------------------------------------------------------------- the table

def done_cells(path: Path) -> dict:
    cells = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                cells[(row["task"], row["budget"], row["method"], row["observation"])] = row
    return cells


def table(cells: dict) -> str:
    """Mean C2ST over the observations done (their count in brackets), by task and budget."""
    lines = ["| task | budget | " + " | ".join(METHODS) + " | NPE, published |",
             "|---|---|" + "---|" * (len(METHODS) + 1)]
    for task in TASKS:
        for budget in BUDGETS:
            row = []
            for method in METHODS:
                scores = [c["c2st"] for (t, b, m, _), c in cells.items() if (t, b, m) == (task, budget, method)]
                row.append(f"{np.mean(scores):.3f} ({len(scores)})" if scores else "")
            if any(row):
                lines.append(f"| {task} | {budget:,} | " + " | ".join(row) + f" | {PUBLISHED[task][budget]:.3f} |")
    return "\n".join(lines)


def plots(out: Path = PLOTS) -> list[Path]:
    """Each task's posterior of observation 1 at the largest budget whose samples are kept:
    theta_1 against theta_2 for each method, sbibm's reference samples on top."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for name in TASKS:
        kept = {(budget, method): SAMPLES / f"{name}_{budget}_{method}_observation_1.npy"
                for budget in BUDGETS for method in METHODS}
        budgets = [b for b in BUDGETS if any(kept[b, m].exists() for m in METHODS)]
        if not budgets:
            continue
        budget = budgets[-1]
        ref = reference.posterior_samples(tasks.get(name), 1)[:KEPT_SAMPLES]
        methods = [m for m in METHODS if kept[budget, m].exists()]
        fig, axes = plt.subplots(1, len(methods), figsize=(3.2 * len(methods), 3.2), sharex=True, sharey=True,
                                 squeeze=False)
        for ax, method in zip(axes[0], methods, strict=True):
            drawn = np.load(kept[budget, method])
            ax.scatter(drawn[:, 0], drawn[:, 1], s=3, alpha=0.4, label=method)
            ax.scatter(ref[:, 0], ref[:, 1], s=1, alpha=0.3, color="black", label="reference")
            ax.set(title=f"{method}, {budget:,} simulations", xlabel="theta_1")
            ax.legend(loc="best", markerscale=3, fontsize="small")  # off the samples
        axes[0][0].set_ylabel("theta_2")
        fig.suptitle(f"{name}: the posterior of sbibm's observation 1")
        fig.tight_layout()
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"sbibm_{name}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written


def run(args) -> None:
    cells = done_cells(args.results)
    args.results.parent.mkdir(parents=True, exist_ok=True)
    for name in args.tasks:
        task = tasks.get(name)
        for budget in args.budgets:
            for method in args.methods:
                todo = [k for k in args.observations if (name, budget, method, k) not in cells]
                if not todo:
                    continue
                theta, x = simulations(task, budget)
                start = time.perf_counter()
                sample = train_sbi(task, theta, x) if method == "sbi" else train_tfp_maf(method, task, theta, x)
                train_seconds = time.perf_counter() - start
                for k in todo:
                    start = time.perf_counter()
                    drawn = sample(reference.observation(task, k), args.samples, seed=k)
                    sample_seconds = time.perf_counter() - start
                    outside = 0 if task.bounds is None else int(np.sum(
                        np.any((drawn < task.bounds[0]) | (drawn > task.bounds[1]), axis=1)))
                    if k == 1:
                        SAMPLES.mkdir(parents=True, exist_ok=True)
                        np.save(SAMPLES / f"{name}_{budget}_{method}_observation_1.npy",
                                drawn[:KEPT_SAMPLES].astype(np.float32))
                    score = c2st(reference.posterior_samples(task, k)[: args.samples], drawn)
                    row = {"task": name, "budget": budget, "method": method, "observation": k,
                           "c2st": round(float(score), 4), "train_seconds": round(train_seconds, 1),
                           "sample_seconds": round(sample_seconds, 2), "samples": args.samples,
                           "outside_prior": outside}
                    with args.results.open("a") as out:
                        out.write(json.dumps(row) + "\n")
                    cells[(name, budget, method, k)] = row
                    print(json.dumps(row), flush=True)
    print(table(cells))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=TASKS)
    parser.add_argument("--budgets", nargs="+", type=int, choices=BUDGETS, default=BUDGETS)
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=METHODS)
    parser.add_argument("--observations", nargs="+", type=int, choices=range(1, 11), default=list(range(1, 11)),
                        metavar="K", help="sbibm's observations, 1 to 10 (default: all)")
    parser.add_argument("--samples", type=int, default=10_000,
                        help="posterior samples scored against as many reference ones (sbibm: 10,000)")
    parser.add_argument("--results", type=Path, default=RESULTS, help="the cells' JSON lines (default: %(default)s)")
    only = parser.add_mutually_exclusive_group()
    only.add_argument("--table", action="store_true", help="print the table of the cells done, run nothing")
    only.add_argument("--plots", action="store_true",
                        help="write each task's posterior plot from the samples kept (docs/assets), run nothing")
    args = parser.parse_args(argv)
    if args.table:
        print(table(done_cells(args.results)))
        return
    if args.plots:
        for path in plots():
            print(path.relative_to(PLOTS.parents[1]))
        return
    run(args)


if __name__ == "__main__":
    main()
