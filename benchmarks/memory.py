"""Peak memory as a user's process sees it: MNIST MAF (5) at the paper's sizes, beside zuko's.

Each contender runs in a fresh process of its own and reports its peak resident set size
(Linux's ``VmHWM``) after each stage of a user's run:

1. the framework imported (TensorFlow, Keras and tfp-maf; torch and zuko);
2. the data loaded (the training set, and the 10,000 rows to evaluate);
3. one epoch of training: 500 steps of batch 100 (an MNIST epoch), ours through
   `keras_models.training.compile_as_paper` and ``model.fit`` on the library's own pipeline
   (`keras_models.data.array_dataset`), zuko's in the usual torch loop;
4. the batch-norm statistics pass of the whole training set that
   `keras_models.training.fit_as_paper` runs at each validation (zuko's MAF has no batch
   norm: no stage);
5. ``log_prob`` of 10,000 rows.

MAF (5) of one hidden layer of 1,024 units (the paper's MNIST model), D 784. The training
set is MNIST's 50,000 rows (``--scale 1``), or ``--scale`` times as many rows (synthetic,
MNIST's rows with noise: the model's size stays, the data's grows) to show what grows
with the data and what does not. What each stage adds above the import baseline is the
figure to compare: it includes the data, which both contenders hold.

Each contender runs ``--repeats`` times (3 by default), each time in a fresh process:
a peak moves between processes with what the allocator happens to keep (zuko's moved
by 15% between runs), so the table gives the process with the median peak above
import, and the range over all of them.

Run:  python benchmarks/memory.py [--scales 1 10] [--repeats 3] [--contenders ...]
Needs the ``bench`` extra (torch, zuko). MNIST is read from ``--data-dir``, else
``$TFP_MAF_DATA``, else ``~/.tfp_maf/data``. Writes benchmarks/results/memory/<machine kind>.json
and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

D, HIDDEN, LAYERS, BATCH, STEPS, EVAL_ROWS = 784, [1024], 5, 100, 500, 10_000
STAGES = ("import", "data", "epoch", "statistics", "log_prob")


def peak_mib() -> float:
    """The process's peak resident set size so far, in MiB."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _load(folder: Path):
    # Read into memory (not memory-mapped): a user's arrays are in memory.
    return np.load(folder / "x_train.npy"), np.load(folder / "x_eval.npy")


def run_ours(folder: Path, jit_compile) -> dict:
    peaks = {}
    import keras  # noqa: F401

    from keras_models import MAF, data, training

    peaks["import"] = peak_mib()
    x_train, x_eval = _load(folder)
    peaks["data"] = peak_mib()
    model = MAF(D, hidden_units=HIDDEN, num_layers=LAYERS)
    training.compile_as_paper(model, "maf5", jit_compile=jit_compile)
    train = data.array_dataset(x_train, batch_size=BATCH, shuffle=True, seed=0)
    model.fit(train, epochs=1, steps_per_epoch=STEPS, verbose=0)
    peaks["epoch"] = peak_mib()
    model.set_batch_norm_statistics(x_train)
    peaks["statistics"] = peak_mib()
    log_prob = model.log_prob(x_eval)
    peaks["log_prob"] = peak_mib()
    return {"peaks": peaks, "eval_log_prob": float(np.mean(log_prob))}


def run_zuko(folder: Path) -> dict:
    peaks = {}
    import torch
    import zuko

    peaks["import"] = peak_mib()
    x_train, x_eval = _load(folder)
    peaks["data"] = peak_mib()
    torch.manual_seed(0)
    flow = zuko.flows.MAF(D, transforms=LAYERS, hidden_features=HIDDEN)
    optimizer = torch.optim.Adam(flow.parameters(), lr=1e-4)
    x = torch.from_numpy(x_train)  # shares the array's memory
    order = torch.randperm(len(x))
    for step in range(STEPS):
        loss = -flow().log_prob(x[order[step * BATCH:(step + 1) * BATCH]]).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    peaks["epoch"] = peak_mib()
    with torch.no_grad():
        log_prob = flow().log_prob(torch.from_numpy(x_eval)).numpy()
    peaks["log_prob"] = peak_mib()
    return {"peaks": peaks, "eval_log_prob": float(np.mean(log_prob))}


RUNS = {
    "tfp-maf": lambda folder: run_ours(folder, "auto"),
    "tfp-maf, XLA off": lambda folder: run_ours(folder, False),
    "zuko": run_zuko,
}


def write_data(folder: Path, scale: int, data_dir) -> dict:
    """MNIST's training rows (``scale`` times, with noise beyond the first copy) and
    10,000 test rows, as .npy files in ``folder``."""
    from keras_models import data

    splits = data.load("mnist", data_dir)
    x = splits.x_train
    if scale > 1:
        rng = np.random.default_rng(0)
        x = np.concatenate([x] + [x + rng.normal(0, 0.1, x.shape).astype(np.float32) for _ in range(scale - 1)])
    np.save(folder / "x_train.npy", x)
    np.save(folder / "x_eval.npy", splits.x_test[:EVAL_ROWS])
    return {"rows": len(x), "train_mib": round(x.nbytes / 2**20, 1)}


def markdown(result: dict) -> str:
    from _common import header

    lines = [header(result, "Peak memory of a user's run (MNIST MAF (5), one hidden layer of 1,024 units)"), "",
             "Peak resident set size (MiB) after each stage, each contender in a fresh process; "
             "*above import* is the peak over the whole run less the import baseline. Each contender "
             f"ran in {result.get('repeats', 1)} processes: the row is the one with the median peak "
             "above import, and the range is over all of them.", ""]
    for run in result["scales"].values():
        lines += [f"### Training set: {run['rows']:,} rows ({run['train_mib']:,.0f} MiB of float32)", "",
                  "| contender | after import | data loaded | one epoch | statistics pass | log_prob of 10,000 "
                  "| above import | range of above import | / zuko's |", "|---|---|---|---|---|---|---|---|---|"]
        zuko = run["contenders"].get("zuko")
        zuko_above = zuko["above_import"] if zuko else None
        for name, row in run["contenders"].items():
            p = row["peaks"]
            cells = [f"{p[s]:,.0f}" if s in p else "-" for s in STAGES]
            ratio = f"{row['above_import'] / zuko_above:.2f}x" if zuko_above else ""
            low, high = min(row["above_import_all"]), max(row["above_import_all"])
            lines.append(f"| {name} | {' | '.join(cells)} | {row['above_import']:,.0f} | "
                         f"{low:,.0f} to {high:,.0f} | {ratio} |")
        ours = run["contenders"].get("tfp-maf")
        if ours and "statistics" in ours["peaks"]:
            added = ours["peaks"]["statistics"] - ours["peaks"]["epoch"]
            lines += ["", f"The statistics pass raised the peak by {added:,.0f} MiB "
                          f"({added / run['train_mib']:.0%} of the training set)."]
        lines.append("")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", default=None, help="default: $TFP_MAF_DATA, else ~/.tfp_maf/data")
    parser.add_argument("--scales", type=int, nargs="+", default=[1, 10],
                        help="training sets of this many times MNIST's rows")
    parser.add_argument("--contenders", nargs="+", default=list(RUNS), choices=list(RUNS))
    parser.add_argument("--repeats", type=int, default=3,
                        help="fresh processes per contender; the median one is reported")
    parser.add_argument("--out", help="a file to write instead of results/memory/<machine kind>.json")
    parser.add_argument("--one", nargs=2, metavar=("CONTENDER", "FOLDER"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:  # a child process: one contender, its figures as the last line
        print(json.dumps(RUNS[args.one[0]](Path(args.one[1]))))
        return None

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from _common import report, run_info

    result = {**run_info(__file__, argv), "repeats": args.repeats, "scales": {}}
    for scale in args.scales:
        with tempfile.TemporaryDirectory() as tmp:
            run = result["scales"][str(scale)] = {**write_data(Path(tmp), scale, args.data_dir), "contenders": {}}
            for name in args.contenders:
                rows = [_one_process(name, tmp, scale) for _ in range(args.repeats)]
                rows.sort(key=lambda row: row["above_import"])
                row = {**rows[(len(rows) - 1) // 2], "above_import_all": [r["above_import"] for r in rows]}
                run["contenders"][name] = row
                print(scale, name, row, flush=True)
    return report("memory", result, markdown, args.out)


def _one_process(name: str, folder: str, scale: int) -> dict:
    """One contender's run in a fresh process, its peaks and its peak above import."""
    start = time.perf_counter()
    child = subprocess.run([sys.executable, __file__, "--one", name, folder],
                           capture_output=True, text=True, check=False)
    if child.returncode:
        sys.exit(f"{name}, scale {scale} failed:\n{child.stderr[-3000:]}")
    row = json.loads(child.stdout.strip().splitlines()[-1])
    row["above_import"] = round(max(row["peaks"].values()) - row["peaks"]["import"], 1)
    row["seconds"] = round(time.perf_counter() - start, 1)
    row["peaks"] = {k: round(v, 1) for k, v in row["peaks"].items()}
    return row


if __name__ == "__main__":
    main()
