"""Training time with each MADE run on slices of the batch, one per core: measured, not adopted.

The sampler runs one slice of the batch per core (`tfp_maf.sampling`). This script asks
whether training gains the same way. Every MADE's matmul chain runs on ``--parts``
slices of the batch and the outputs are concatenated; the batch norms between the MADEs
still see the whole batch, so the statistics, the loss and the gradients are those of the
unsliced model. The slices' chains are independent, so XLA's executor (or TF's, with
``--jit off``) may run them at the same time. MAF (5) trains on N(0, I) data on the path
users take (`compile_as_paper`, then `model.fit`), the whole batch and the slices
interleaved round by round; figures are medians of the rounds, in examples per second.

``--intra-op-threads 1`` runs each matmul on one core, so that the parallelism comes from
the slices alone. It is the process's setting, fixed before TensorFlow's first op, so it
is given here and never by the library.

    python benchmarks/experiments/batch_slices.py
    python benchmarks/experiments/batch_slices.py --jit off --intra-op-threads 1

Writes benchmarks/results/batch_slices/<machine kind>.json and .md (`_common.report`),
the folder's name extended by the options that differ from the defaults: the second
command above writes to batch_slices_no_xla_one_thread/.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for _common

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from _common import header, report, run_info, whole_executions  # noqa: E402

#: (name, D, hidden units, batch, steps a timed `fit` call): about a second of training each.
CASES = (("A", 43, [512, 512], 100, 1000), ("A", 43, [512, 512], 1000, 100), ("mnist", 784, [1024], 100, 200))


def slice_batches(model, parts: int) -> None:
    """Makes every MADE of ``model`` run its network on ``parts`` slices of the batch.

    The batch size must be a multiple of ``parts``. Reading the kernels once per slice
    costs nothing under XLA, which reads each variable once."""
    for made in model.mades:
        whole = made.flat_params

        def sliced(x2d, y_terms, whole=whole):
            xs = tf.split(x2d, parts)
            ys = [y_terms] * parts
            if y_terms[0] is not None:
                ys = zip(*[tf.split(t, parts) for t in y_terms], strict=True)
            return tf.concat([whole(x, list(y)) for x, y in zip(xs, ys, strict=True)], axis=0)

        made.flat_params = sliced


def case_rates(D, hidden, batch, steps, parts, rounds, jit) -> dict:
    import keras_models as km
    from keras_models import data, training

    x = np.random.default_rng(0).standard_normal((batch * steps, D)).astype(np.float32)
    ds = data.array_dataset(x, batch_size=batch, shuffle=True, seed=0).repeat()
    models = {}
    for p in (1, parts):
        model = km.MAF(D, hidden_units=hidden, num_layers=5, seed=0)
        if p > 1:
            slice_batches(model, p)
        training.compile_as_paper(model, "maf5", jit_compile=jit)
        steps = whole_executions(steps, int(model.steps_per_execution))
        model.fit(ds, steps_per_epoch=int(model.steps_per_execution), epochs=1, verbose=0)  # compile
        models[p] = model
    rates = {p: [] for p in models}
    for _ in range(rounds):
        for p, model in models.items():
            start = time.perf_counter()
            model.fit(ds, steps_per_epoch=steps, epochs=1, verbose=0)
            rates[p].append(batch * steps / (time.perf_counter() - start))
    return {str(p): {"examples_per_s": float(np.median(r)), "rounds": [round(v) for v in r]} for p, r in rates.items()}


def markdown(result) -> str:
    lines = [
        header(result, "MAF (5) training with the MADEs run on batch slices "
               "(`benchmarks/experiments/batch_slices.py`)"),
        "`fit` after `compile_as_paper`, "
        f"XLA {result['jit']}, intra-op threads {result['intra_op_threads'] or 'default'}, "
        f"medians of {result['rounds']} interleaved rounds.",
        "",
        "| case | slices | examples/s | against the whole batch |",
        "|---|---|---|---|",
    ]
    for case in result["cases"]:
        whole = case["rates"]["1"]["examples_per_s"]
        for p, r in case["rates"].items():
            lines.append(f"| {case['name']}, batch {case['batch']} | {p} | {r['examples_per_s']:,.0f} "
                         f"| {r['examples_per_s'] / whole:.2f}x |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--jit", choices=["on", "off"], default="on")
    parser.add_argument("--intra-op-threads", type=int, default=0, help="0: TensorFlow's default")
    parser.add_argument("--out", default=None, help="the .json to write (default: see above)")
    args = parser.parse_args(argv)
    if args.intra_op_threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.intra_op_threads)
    cases = []
    for name, D, hidden, batch, steps in CASES:
        rates = case_rates(D, hidden, batch, steps, args.parts, args.rounds, args.jit == "on")
        cases.append({"name": name, "D": D, "hidden": hidden, "batch": batch, "rates": rates})
        print(f"{name} b{batch}: " + ", ".join(f"{p} slices {r['examples_per_s']:,.0f}/s" for p, r in rates.items()),
              flush=True)
    result = {**run_info(__file__, argv), "rounds": args.rounds, "jit": args.jit,
              "intra_op_threads": args.intra_op_threads, "cases": cases}
    measure = "batch_slices" + ("_no_xla" if args.jit == "off" else "")
    if args.intra_op_threads:
        measure += "_one_thread" if args.intra_op_threads == 1 else f"_{args.intra_op_threads}_threads"
    return report(measure, result, markdown, args.out)


if __name__ == "__main__":
    main(sys.argv[1:])
