"""tfp-maf against TFP's, zuko's and nflows' MAF: training, log_prob and sampling speed, in one run.

Configurations (float32, batch norm between MAF layers, N(0, I) data):
  A (MINIBOONE-like): D = 43,  MAF (5), MADEs of 2 x 512 relu;
  B (MNIST-like):     D = 784, MAF (5), MADEs of 1 x 1024 relu.

The peers, each at its strongest: TFP's MAF (`tfb.MaskedAutoregressiveFlow` over
`tfb.AutoregressiveNetwork`, with `tfb.BatchNormalization` and `tfb.Permute` reversing the
order between layers), trained by Adam in a GradientTape step under `tf.function`, with
and without `jit_compile`; and, where the ``bench`` extra is installed, zuko's and nflows'
MAF under `torch.compile` (`_torch_peers.py`). TFP's are tf_keras layers: this benchmark
imports tf_keras for that peer only. Its batch norm drifts to NaN at step size 1e-4 on
N(0, I) within a few hundred steps, so it is rebuilt for every timed repeat. Every ratio
is against the best peer of its row.

Measured (medians, with min and max, of --repeats, and of at least 5 rounds wherever
contenders run interleaved): training examples/s at batch 100 and
1,000 (ours with jit_compile, the default, and without, and the peer, in turn within each
round; one model of ours per measure, the peer rebuilt each round; step counts are whole
multiples of Keras' steps_per_execution), log_prob throughput
on --logprob-points points in batches of 10,000, the time to draw 10,000 (A) and 1,000 (B)
samples and, interleaved with it, the time of our log_prob on as many points, the machine's
float32 matmul throughput and the share of it that our log_prob achieves, and sampling time
against D for one MADE layer.

The log_prob contenders (ours with and without jit_compile, TFP's log_prob, and TFP's
inverse alone, which is one pass per MADE) and a 2048 x 2048 matmul run in turn within
each of at least 5 rounds, so a neighbour's load on a shared machine falls on all of
them alike; the share of matmul is taken against the matmul of those same rounds.
Every timed window also records the host's steal (the share of the CPUs' time the host
gave to other guests), and the table prints it per row: a ratio read while the host
stole a quarter of the machine says less than one read at 2%.

Writes benchmarks/results/speed/<machine kind>.json and .md, or, for one configuration,
speed_config_a/ or speed_config_b/ (`_common.report`).

    python benchmarks/speed.py                          # the full run (about 30 minutes on 2 cores)
    python benchmarks/speed.py --quick --configs A      # fewer steps and repeats, config A
"""

from __future__ import annotations

import argparse
import functools
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import _torch_peers as torch_peers  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_probability as tfp  # noqa: E402
from _common import (  # noqa: E402
    MATMUL_FLOPS,
    MIN_ROUNDS,
    STEPS_PER_EXECUTION,
    batches,
    header,
    interleaved,
    maf_as_paper,
    matmul_gflops,
    matmul_run,
    normal_data,
    report,
    run_info,
    sync,
    tfp_peer,
    timed,
    whole_executions,
)

import keras_models as km  # noqa: E402
from keras_models import data  # noqa: E402

tfd, tfb = tfp.distributions, tfp.bijectors
CONFIGS = {
    "A": {"D": 43, "hidden": [512, 512], "samples": 10_000},
    "B": {"D": 784, "hidden": [1024], "samples": 1_000},
}


# --------------------------------------------------------------------------- measures

def train_ours(D, hidden, batch, steps, jit):
    """``(setup, run)``: one compiled model for every round, then ``steps`` steps of `fit`.

    One model, where the peer is rebuilt each round: ours needs no reset, and every
    model a process builds and traces stays in memory (TFP's bijector cache and
    `tf.custom_gradient` keep each traced graph alive), which at 5 rounds ran a 2-core
    machine with 24 GiB out of memory in config B.
    """
    # The pipeline users train on: shuffled batches gathered from an in-memory array.
    ds = data.array_dataset(normal_data(D, batch * steps).numpy(), batch_size=batch, shuffle=True, seed=0).repeat()

    @functools.cache
    def setup():
        model = maf_as_paper(D, hidden, jit)
        # shuffle=False: the pipeline shuffles (Keras would only warn that it ignores the flag).
        model.fit(ds, steps_per_epoch=STEPS_PER_EXECUTION, epochs=1, verbose=0, shuffle=False)  # trace / compile
        return model

    def run(model):
        before = int(model.optimizer.iterations.numpy())
        model.fit(ds, steps_per_epoch=steps, epochs=1, verbose=0, shuffle=False)
        ran = int(model.optimizer.iterations.numpy()) - before
        if ran != steps:  # the rate below divides by steps
            raise RuntimeError(f"fit ran {ran} steps, {steps} were timed")

    return setup, run


def train_peer(D, hidden, batch, steps, jit_compile=False):
    """``(setup, run)``: a fresh flow (its batch norm drifts to NaN), then ``steps`` steps."""
    x = normal_data(D, batch)

    def setup():
        _, step = tfp_peer(D, hidden, jit_compile)
        sync(step(x))
        return step

    def run(step):
        for _ in range(steps):
            loss = step(x)
        sync(loss)

    return setup, run


#: The peers' names in the results, in the order of the tables' columns.
PEERS = ("tfp", "tfp_jit", *torch_peers.NAMES)


def train_rates(D, hidden, batch, steps, repeats):
    """Examples/s of ours (jit_compile on, the default, and off) and of each peer, interleaved."""
    x = normal_data(D, batch).numpy()
    out = interleaved({"ours": train_ours(D, hidden, batch, steps, jit=True),
                       "ours_no_jit": train_ours(D, hidden, batch, steps, jit=False),
                       "tfp": train_peer(D, hidden, batch, steps),
                       "tfp_jit": train_peer(D, hidden, batch, steps, jit_compile=True),
                       **{name: torch_peers.train(name, D, hidden, x, steps) for name in torch_peers.available()}},
                      repeats)
    return {k: {**t, "steps": steps, "examples_per_s": batch * steps / t["median_s"]} for k, t in out.items()}


def log_prob_fns(D, hidden):
    """The model, the peer's flow, and the log_prob functions timed against each other."""
    model = maf_as_paper(D, hidden)
    model.set_batch_norm_statistics(normal_data(D, 1000).numpy())
    flow, _ = tfp_peer(D, hidden)
    fns = {
        # `model.log_prob` as users call it, and the same under XLA (as
        # `evaluate` runs it after `compile_as_paper`, whose jit_compile is True).
        "ours": tf.function(lambda x: model.log_prob(x)),
        "ours_jit": tf.function(lambda x: model.log_prob(x), jit_compile=True),
        # The peer's batch norm fixes `training` at construction (True: batch
        # statistics); the cost differs from evaluation mode by a few elementwise ops.
        "tfp": tf.function(flow.log_prob),
        "tfp_jit": tf.function(flow.log_prob, jit_compile=True),
        # The peer's inverse alone: one pass of each of its MADEs, where its
        # log_prob makes two (its log-det runs the network again). This is the
        # floor a one-pass log_prob is measured against.
        "tfp_inverse_only": tf.function(lambda x: flow.bijector.inverse(x)),
    }
    return model, flow, fns


def log_prob_time(fns, points, repeats, D, hidden, batch=10_000):
    """Interleaved timings of each ``fns[k]`` and of the torch peers over ``points``, plus the
    matmul rate per round."""
    runs = {k: batches(fn, points, batch) for k, fn in fns.items()}
    runs.update({name: torch_peers.log_prob_run(name, D, hidden, points.numpy(), batch)
                 for name in torch_peers.available()})
    runs["matmul"] = matmul_run()
    out = interleaved(runs, repeats)
    out["matmul"]["gflops"] = MATMUL_FLOPS / out["matmul"]["median_s"] / 1e9
    return out


def sample_time(sample_fn, n, repeats):
    sync(sample_fn(n))
    return timed(lambda: sync(sample_fn(n)), repeats)


def made_flops_per_example(D, hidden, layers=5):
    widths = [D, *hidden, 2 * D]
    return layers * sum(2 * a * b for a, b in zip(widths[:-1], widths[1:], strict=True))


def sampling_vs_d(hidden, n, repeats, peer_repeats):
    rows = []
    for D in (8, 43, 63, 784):
        made = km.MADE(D, hidden_units=hidden, seed=0)
        ours_fn = tf.function(lambda n, m=made: m.sample(n, seed=1))
        net = tfb.AutoregressiveNetwork(params=2, hidden_units=hidden, activation="relu", event_shape=[D])
        theirs = tfd.TransformedDistribution(tfd.MultivariateNormalDiag(loc=tf.zeros(D)),
                                             tfb.MaskedAutoregressiveFlow(net))
        peer_fn = tf.function(lambda n, d=theirs: d.sample(n, seed=1))
        rows.append({
            "D": D, "n": n,
            "ours": sample_time(ours_fn, n, repeats),
            "tfp": sample_time(peer_fn, n, peer_repeats),
        })
        print(f"  sampling vs D: D={D} ours {rows[-1]['ours']['median_s']:.3f}s "
              f"tfp {rows[-1]['tfp']['median_s']:.3f}s", flush=True)
    return rows


# ---------------------------------------------------------------------------------- main

def run_config(name, cfg, args):
    D, hidden, n_samples = cfg["D"], cfg["hidden"], cfg["samples"]
    out = {"config": name, "D": D, "hidden": hidden, "layers": 5}
    steps = {100: args.steps_100, 1000: args.steps_1000}
    for batch in (100, 1000):
        s = whole_executions(steps[batch] if name == "A" else max(2, steps[batch] // 4), STEPS_PER_EXECUTION)
        out[f"train_b{batch}"] = train_rates(D, hidden, batch, s, max(args.repeats, MIN_ROUNDS))
        print(f"  {name} train b{batch}: " + ", ".join(
            f"{k} {v['examples_per_s']:.0f}/s" for k, v in out[f"train_b{batch}"].items()), flush=True)

    model, flow, lp = log_prob_fns(D, hidden)
    points = normal_data(D, args.logprob_points if name == "A" else args.logprob_points // 10, seed=3)
    out["log_prob_points"] = int(points.shape[0])
    timings = log_prob_time(lp, points, max(args.repeats, MIN_ROUNDS), D, hidden)
    out["log_prob_matmul"] = timings.pop("matmul")
    out["log_prob"] = timings
    for t in out["log_prob"].values():
        t["points_per_s"] = points.shape[0] / t["median_s"]
    out["log_prob_flops_per_point"] = made_flops_per_example(D, hidden)
    out["log_prob_gflops_ours"] = out["log_prob_flops_per_point"] * out["log_prob"]["ours"]["points_per_s"] / 1e9
    print(f"  {name} log_prob: " + ", ".join(
        f"{k} {v['points_per_s']:.0f}/s" for k, v in out["log_prob"].items()), flush=True)

    # Our sampling and our log_prob on as many points, interleaved: their ratio
    # is a target, and back to back a neighbour's load can fall on one of them only.
    sample_ours = tf.function(lambda n: model.sample(n, seed=1))
    sample_run = lambda: sync(sample_ours(n_samples))  # noqa: E731
    sample_run()  # trace and compile
    pair = interleaved({"sample": sample_run,
                        "log_prob": batches(lp["ours"], normal_data(D, n_samples, seed=4), n_samples)},
                       max(args.repeats, MIN_ROUNDS))
    out["log_prob_on_sample_size"] = {"ours": pair["log_prob"]}
    sample_peer = tf.function(lambda n: flow.sample(n, seed=1))
    out["samples"] = n_samples
    peer_repeats = args.peer_sample_repeats if name == "B" else args.repeats
    out["sample"] = {"ours": pair["sample"], "tfp": sample_time(sample_peer, n_samples, peer_repeats)}
    if name == "A":  # on B the torch peers take minutes a draw, as TFP's: TFP stands for them
        for peer_name in torch_peers.available():
            out["sample"][peer_name] = timed(torch_peers.sample_run(peer_name, D, hidden, n_samples), peer_repeats)
    print(f"  {name} sample {n_samples}: " + ", ".join(
        f"{k} {v['median_s']:.3f}s" for k, v in out["sample"].items()), flush=True)
    return out


def _best_peer(row, key, higher_is_better=True):
    """The peer of ``row`` (a dict of contenders' stats) that does best on ``key``."""
    present = [p for p in PEERS if p in row]
    return (max if higher_is_better else min)(present, key=lambda p: row[p][key])


def ratios(r):
    """Ours against the best peer of each row (and against TFP with XLA, a target of its own)."""
    lp, sm = r["log_prob"], r["sample"]
    out = {}
    for b in (100, 1000):
        t = r[f"train_b{b}"]
        best = _best_peer(t, "examples_per_s")
        out[f"train_b{b}_best_peer"] = best
        for ours, suffix in (("ours", ""), ("ours_no_jit", "_no_jit")):
            out[f"train_b{b}_vs_best_peer{suffix}"] = t[ours]["examples_per_s"] / t[best]["examples_per_s"]
    best = _best_peer(lp, "points_per_s")
    best_sample = _best_peer(sm, "median_s", higher_is_better=False)
    return {
        **out,
        "log_prob_best_peer": best,
        "log_prob_vs_best_peer": lp["ours"]["points_per_s"] / lp[best]["points_per_s"],
        "log_prob_jit_vs_best_peer": lp["ours_jit"]["points_per_s"] / lp[best]["points_per_s"],
        "log_prob_vs_tfp_jit": lp["ours"]["points_per_s"] / lp["tfp_jit"]["points_per_s"],
        "log_prob_over_tfp_inverse_only": lp["ours"]["points_per_s"] / lp["tfp_inverse_only"]["points_per_s"],
        # Against the matmul rate measured in the same interleaved rounds.
        "log_prob_share_of_matmul": r["log_prob_gflops_ours"] / r["log_prob_matmul"]["gflops"],
        "sample_best_peer": best_sample,
        "sample_vs_best_peer": sm[best_sample]["median_s"] / sm["ours"]["median_s"],
        "sample_vs_tfp": sm["tfp"]["median_s"] / sm["ours"]["median_s"],
        "sample_over_log_prob_same_n": sm["ours"]["median_s"] / r["log_prob_on_sample_size"]["ours"]["median_s"],
    }


def _steal(*stats) -> str:
    """The host's steal over the timed windows of ``stats``, pooled: median (max)."""
    shares = [v for t in stats for v in t.get("host_steal", [])]
    return f"{100 * np.median(shares):.0f}% ({100 * max(shares):.0f}%)" if shares else "n/a"


def _cells(row, key, fmt, names):
    return " | ".join(format(row[k][key], fmt) if k in row else "-" for k in names)


def markdown(result):
    peers = " | ".join(("TFP", "TFP, XLA", *(f"{p}, compiled" for p in torch_peers.NAMES)))
    configs = " and ".join(r["config"] for r in result["configs"])
    lines = [header(result, f"Training, `log_prob` and sampling against TFP, zuko and nflows, config {configs} "
                    "(`benchmarks/speed.py`)"),
             f"| config | measure | tfp-maf | tfp-maf, jit flipped | {peers} | tfp-maf / best peer | host steal |",
             "|---|---|---|---|" + "---|" * len(PEERS) + "---|---|"]
    for r in result["configs"]:
        c, q = r["config"], r["ratios"]
        for b in (100, 1000):
            t = r[f"train_b{b}"]
            lines.append(f"| {c} | training, batch {b} (examples/s) | {t['ours']['examples_per_s']:.0f} | "
                         f"{t['ours_no_jit']['examples_per_s']:.0f} | {_cells(t, 'examples_per_s', '.0f', PEERS)} | "
                         f"**{q[f'train_b{b}_vs_best_peer']:.2f}x** {q[f'train_b{b}_best_peer']} "
                         f"({q[f'train_b{b}_vs_best_peer_no_jit']:.2f}x jit flipped) | {_steal(*t.values())} |")
        lp = r["log_prob"]
        lines.append(f"| {c} | log_prob on {r['log_prob_points']:,} points (points/s) | "
                     f"{lp['ours']['points_per_s']:.0f} | {lp['ours_jit']['points_per_s']:.0f} | "
                     f"{_cells(lp, 'points_per_s', '.0f', PEERS)} | "
                     f"**{q['log_prob_vs_best_peer']:.2f}x** {q['log_prob_best_peer']} "
                     f"({q['log_prob_jit_vs_best_peer']:.2f}x jit flipped); "
                     f"{100 * q['log_prob_share_of_matmul']:.0f}% of matmul at "
                     f"{r['log_prob_matmul']['gflops']:.0f} GFLOP/s | "
                     f"{_steal(*lp.values(), r['log_prob_matmul'])} |")
        lines.append(f"| {c} | TFP's inverse alone, one pass per MADE (points/s) | | | "
                     f"{lp['tfp_inverse_only']['points_per_s']:.0f} |" + " |" * (len(PEERS) - 1) +
                     f" {q['log_prob_over_tfp_inverse_only']:.2f}x | {_steal(lp['tfp_inverse_only'])} |")
        sm = r["sample"]
        lines.append(f"| {c} | {r['samples']:,} samples (s) | {sm['ours']['median_s']:.3f} | | "
                     f"{_cells(sm, 'median_s', '.3f', PEERS)} | **{q['sample_vs_best_peer']:.1f}x** "
                     f"{q['sample_best_peer']}; {q['sample_over_log_prob_same_n']:.1f}x our log_prob on "
                     f"{r['samples']:,} | {_steal(*sm.values(), *r['log_prob_on_sample_size'].values())} |")
    lines += ["", "tfp-maf is the default path: `fit` after `compile_as_paper` (jit_compile=True), "
              "`model.log_prob` in a plain `tf.function`, `model.sample`. The next column flips jit_compile "
              "(for log_prob: turns XLA on). Peers: TFP's MAF in a `tf.function` GradientTape step, without "
              "and with XLA; zuko's (no batch norm: it has none) and nflows' MAF under `torch.compile`, "
              "optimizer step included; '-' where a peer was not installed or, for sampling on B, not run "
              "(minutes a draw). The training rows and the log_prob rows ran interleaved, round by round (the "
              "log_prob rows with the matmul they are a share of); our sampling ran interleaved with our "
              "log_prob on as many points. Host steal: the share of the CPUs' time the host gave to other "
              "guests during the row's timed windows, median (max).",
              "", "Sampling time against D (one MADE, 1 x 1024, n samples):", "",
              "| D | tfp-maf (s) | TFP (s) | ratio | host steal |", "|---|---|---|---|---|"]
    for r in result["sampling_vs_d"]:
        lines.append(f"| {r['D']} | {r['ours']['median_s']:.4f} | {r['tfp']['median_s']:.3f} | "
                     f"{r['tfp']['median_s'] / r['ours']['median_s']:.1f}x | {_steal(r['ours'], r['tfp'])} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--peer-sample-repeats", type=int, default=3,
                        help="repeats of TFP's sampling on config B (minutes each on 2 cores)")
    parser.add_argument("--steps-100", type=int, default=100)
    parser.add_argument("--steps-1000", type=int, default=20)
    parser.add_argument("--logprob-points", type=int, default=100_000)
    parser.add_argument("--configs", default="AB")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=None, help="the .json to write (default: see above)")
    args = parser.parse_args(argv)
    if args.quick:
        # Still 10,000 examples per timed `fit` call, as an epoch of config A has 30,000:
        # Keras sets up each `fit` call (about 28 ms on 2 cores: the iterator, the callbacks),
        # which users pay once an epoch, not once every 10 steps (10 steps read config A's
        # batch 100 at 7,300 examples/s where 200 a call read 9,200, measured).
        args.repeats, args.peer_sample_repeats, args.steps_100, args.steps_1000 = 1, 1, 100, 10
        args.logprob_points = 20_000
    # Another process on the same cores slows the torch peers' OpenMP threads far more
    # than ours (37x against 1.6x, measured): the ratios would flatter us.
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    if load is not None and load > 0.5:
        print(f"warning: load average {load:.1f} at the start: ratios against the torch peers need a quiet "
              "machine", flush=True)
    matmul = matmul_gflops(max(args.repeats, MIN_ROUNDS))
    print(f"float32 matmul: {matmul:.1f} GFLOP/s", flush=True)
    configs = []
    for name in args.configs:
        r = run_config(name, CONFIGS[name], args)
        r["ratios"] = ratios(r)
        configs.append(r)
    result = {
        **run_info(__file__, argv, matmul), "load_average_at_start": load, "configs": configs,
        "sampling_vs_d": sampling_vs_d([1024], 1000, args.repeats, 1),
    }
    measure = "speed" if sorted(args.configs) == sorted(CONFIGS) else f"speed_config_{args.configs.lower()}"
    return report(measure, result, markdown, args.out)


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
