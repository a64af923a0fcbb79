"""Do keras_models.sbi's tasks match sbibm's? Checked against sbibm's shipped files.

For each task and each of sbibm's 10 observations x_o (with its true parameters
theta_o and its 10,000 reference posterior samples):

(a) box: the reference samples lie inside our prior's box (the bounded tasks);
(b) posterior: for gaussian_linear, the reference samples' mean and covariance are our
    closed-form posterior's at x_o (a wrong noise or prior scale moves the covariance:
    0.05 I with variances 0.1, 0.005 I if they were standard deviations);
(c) predictive: one x simulated by our simulator from each reference sample; the
    observation's per-dimension z-score, (x_o - mean) / std, within that predictive;
(d) likelihood: 100,000 x simulated from theta_o; the share of them below x_o in each
    dimension, u = P(x < x_o | theta_o). x_o is one draw of sbibm's simulator at
    theta_o, so that if ours is the same, the u of the 10 observations and all the
    dimensions are uniform on [0, 1] (a Kolmogorov-Smirnov test), and none is beyond
    the 1% two-sided Bonferroni bound of their number. A simulator too narrow puts the u
    near 0 and 1, one too broad near 0.5: the test sees both.
(e) C2ST: two_moons and gaussian_mixture, whose reference posteriors sbibm draws from
    the simulator's noise at theta = 0 mapped back through x_o (rejecting what leaves
    the prior's box): the same construction on our simulator's draws, against sbibm's
    samples; 0.5 if they agree. It sees a noise scale that (c) and (d) cannot (a
    mixture scale of 0.01 for 0.1). (gaussian_linear's Gaussian is held by its mean and
    covariance in (b); a C2ST in 10-D, whose classifier overfits to its 10,000 epochs,
    would take minutes an observation.)

Needs sbibm's files (``pip install --no-deps sbibm==1.1.0``); quick (seconds), so it
starts over at each run. Prints a table and writes
``benchmarks/results/sbibm_tasks_check.json``:

    python benchmarks/sbibm_tasks_check.py
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import math
import platform
import sys
from pathlib import Path

import numpy as np
from scipy import stats

from keras_models.sbi import c2st, reference, tasks

OUT = Path(__file__).resolve().parent / "results" / "sbibm_tasks_check.json"

# What counts as a match: no reference sample outside the box; the posterior mean within
# 5 standard errors and its covariance within 0.005 (a tenth of 0.05); |z| < 4 in the
# predictive; in (d) a KS p-value above 1% and no u beyond 0.01 / (2 * their number);
# in (e) a C2ST below 0.55 (its standard error at 2 x 2,000 samples is about 0.008).
MAX_SE, MAX_COV_ERROR, MAX_Z, MIN_KS_P, ALPHA, MAX_C2ST = 5.0, 0.005, 4.0, 0.01, 0.01, 0.55
LIKELIHOOD_DRAWS, C2ST_SAMPLES = 100_000, 2000


def _inside(task, theta):
    low, high = task.bounds
    return theta[np.all((theta >= low) & (theta <= high), axis=1)]


def two_moons_posterior(task, x_o, n, rng):
    """sbibm's construction of two_moons' reference posterior, on our simulator: its
    draw p at theta = 0 is the noise; q = (p_1 - x_o1, x_o2 - p_2), the first sign at
    random, rotated by pi/4 (the inverse of the simulator's rotation) is a theta."""
    out = []
    while sum(map(len, out)) < n:
        p = task.simulate(np.zeros((n, 2)), rng)  # theta = 0: no shift, x = p
        q0 = (p[:, 0] - x_o[0]) * rng.choice([-1.0, 1.0], size=n)
        q1 = x_o[1] - p[:, 1]
        out.append(_inside(task, np.stack([q0 - q1, q0 + q1], axis=1) / math.sqrt(2.0)))
    return np.concatenate(out)[:n]


def gaussian_mixture_posterior(task, x_o, n, rng):
    """sbibm's construction: theta = x_o + noise (the mixture is symmetric about its
    mean), our simulator's noise at theta = 0, rejecting what leaves the box."""
    out = []
    while sum(map(len, out)) < n:
        out.append(_inside(task, x_o + task.simulate(np.zeros((n, 2)), rng)))
    return np.concatenate(out)[:n]


#: The tasks whose reference posterior we draw as sbibm does (check (e)).
CLOSED_FORM = {"two_moons": two_moons_posterior, "gaussian_mixture": gaussian_mixture_posterior}


def check_observation(task, k: int, rng: np.random.Generator) -> dict:
    x_o, theta_o = reference.observation(task, k), reference.true_parameters(task, k)
    samples = reference.posterior_samples(task, k)
    row = {"observation": k}
    if task.bounds is not None:
        low, high = task.bounds
        row["outside_box"] = int(np.sum(np.any((samples < low) | (samples > high), axis=1)))
    if task.name == "gaussian_linear":
        mean, cov = task.posterior(x_o)
        se = np.sqrt(np.diag(cov) / len(samples))
        row["mean_error_se"] = float(np.max(np.abs(samples.mean(axis=0) - mean) / se))
        row["cov_error"] = float(np.max(np.abs(np.cov(samples.T) - cov)))
        row["reference_variance"] = float(np.mean(np.diag(np.cov(samples.T))))
    x = task.simulate(samples, rng)
    row["predictive_max_abs_z"] = float(np.max(np.abs((x_o - x.mean(axis=0)) / x.std(axis=0))))
    x = task.simulate(np.repeat(theta_o[None], LIKELIHOOD_DRAWS, axis=0), rng)
    row["likelihood_u"] = np.mean(x < x_o, axis=0).tolist()
    if task.name in CLOSED_FORM:
        ours = CLOSED_FORM[task.name](task, x_o, C2ST_SAMPLES, rng)
        picked = rng.choice(len(samples), size=C2ST_SAMPLES, replace=False)
        row["c2st"] = c2st(samples[picked], ours, seed=1)
    return row


def summarise(name: str, rows: list[dict]) -> dict:
    out = {"task": name}
    if "outside_box" in rows[0]:
        out["outside_box"] = sum(r["outside_box"] for r in rows)
    if "cov_error" in rows[0]:
        out["mean_error_se"] = max(r["mean_error_se"] for r in rows)
        out["cov_error"] = max(r["cov_error"] for r in rows)
    out["predictive_max_abs_z"] = max(r["predictive_max_abs_z"] for r in rows)
    u = np.concatenate([r["likelihood_u"] for r in rows])
    out["likelihood_u_min"], out["likelihood_u_max"] = float(u.min()), float(u.max())
    out["likelihood_ks_p"] = float(stats.kstest(u, "uniform").pvalue)
    if "c2st" in rows[0]:
        out["c2st_max"] = max(r["c2st"] for r in rows)
    bound = ALPHA / (2 * u.size)
    out["match"] = bool(
        out.get("outside_box", 0) == 0
        and out.get("mean_error_se", 0.0) < MAX_SE
        and out.get("cov_error", 0.0) < MAX_COV_ERROR
        and out["predictive_max_abs_z"] < MAX_Z
        and out["likelihood_ks_p"] > MIN_KS_P
        and bound < out["likelihood_u_min"]
        and out["likelihood_u_max"] < 1 - bound
        and out.get("c2st_max", 0.5) < MAX_C2ST
    )
    return out


def table(summaries: list[dict]) -> str:
    def cell(s, key, fmt):
        return format(s[key], fmt) if key in s else "-"

    lines = [
        "| task | outside box | posterior mean (max SE) | posterior cov (max abs error) "
        "| predictive max abs z | likelihood u (min, max) | u uniform (KS p) | C2ST ours vs sbibm (max) | match |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summaries:
        lines.append(
            f"| {s['task']} | {cell(s, 'outside_box', 'd')} | {cell(s, 'mean_error_se', '.2f')} "
            f"| {cell(s, 'cov_error', '.4f')} | {s['predictive_max_abs_z']:.2f} "
            f"| {s['likelihood_u_min']:.4f}, {s['likelihood_u_max']:.4f} | {s['likelihood_ks_p']:.2f} "
            f"| {cell(s, 'c2st_max', '.3f')} "
            f"| {'yes' if s['match'] else 'NO'} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0, help="seeds the simulations (default 0)")
    parser.add_argument("--out", type=Path, default=OUT, help=f"the JSON written (default {OUT.name} in results/)")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    per_task, summaries = {}, []
    for name in tasks.NAMES:
        task = tasks.get(name)
        rows = [check_observation(task, k, rng) for k in range(1, reference.NUM_OBSERVATIONS + 1)]
        per_task[name] = rows
        summaries.append(summarise(name, rows))
    markdown = table(summaries)
    print(markdown)
    result = {
        "script": "benchmarks/sbibm_tasks_check.py",
        "command": " ".join(["python", "benchmarks/sbibm_tasks_check.py", *(argv or sys.argv[1:])]),
        "date": datetime.date.today().isoformat(),
        "sbibm": importlib.metadata.version("sbibm"),
        "numpy": np.__version__,
        "python": platform.python_version(),
        "seed": args.seed,
        "thresholds": {"max_se": MAX_SE, "max_cov_error": MAX_COV_ERROR, "max_z": MAX_Z, "min_ks_p": MIN_KS_P,
                       "bonferroni_alpha": ALPHA, "max_c2st": MAX_C2ST},
        "likelihood_draws": LIKELIHOOD_DRAWS,
        "c2st_samples": C2ST_SAMPLES,
        "summary": summaries,
        "observations": per_task,
        "table": markdown,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0 if all(s["match"] for s in summaries) else 1


if __name__ == "__main__":
    sys.exit(main())
