"""Tutorial 5: training on several machines with `tf.distribute.MultiWorkerMirroredStrategy`.

Each machine (a *worker*) runs the same script; `TF_CONFIG` tells it the addresses of
all workers and which one it is. Every worker holds a copy of the weights; each step
the global batch is split between the workers, gradients are summed across them, and
the batch norms use the statistics of the global batch. Worker 0 (the *chief*)
writes the model.

Here both workers run on one machine (two processes on localhost ports), so the
tutorial runs anywhere:

    python tutorials/05_multi_worker.py            # MAF (5) on the Figure 1 density
    python tutorials/05_multi_worker.py --fast     # what the tests run

On real machines, start on each of them::

    TF_CONFIG='{"cluster": {"worker": ["host1:12345", "host2:12345"]},
                "task": {"type": "worker", "index": 0}}' python train.py   # index 1 on host2

with the body of `worker` below as ``train.py``. With several GPUs in one machine,
use ``tf.distribute.MirroredStrategy()`` instead: no TF_CONFIG, the rest is the same.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def worker(out: str, fast: bool) -> None:
    """What each worker runs. TF_CONFIG is already in its environment."""
    import tensorflow as tf

    # 1. The strategy first: it reads TF_CONFIG and connects to the other workers.
    strategy = tf.distribute.MultiWorkerMirroredStrategy()

    import keras

    import keras_models as km
    from keras_models import data, training

    keras.utils.set_random_seed(0)  # every worker starts from the same weights
    splits = data.load_figure1(n_train=2_000 if fast else 10_000)
    # 2. Model and optimizer are created inside the scope: their variables are mirrored.
    with strategy.scope():
        model = km.MAF(2, hidden_units=[32, 32] if fast else [100, 100], num_layers=5)
        training.compile_as_paper(model, "maf5")
    # 3. Each worker builds the same pipeline; Keras gives each one its share of
    #    every global batch of 100.
    pipelines = splits.pipelines(batch_size=100, seed=0)
    _, info = training.fit_as_paper(
        model, pipelines.train, pipelines.validation, splits.x_train,
        max_epochs=3 if fast else 1000, verbose=0, shuffle_epoch=pipelines.epoch,
    )
    log_p = model.log_prob(splits.x_test).numpy()
    task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    # 4. Every worker must take part in saving (it is a collective operation), but
    #    only the chief's copy is kept.
    target = Path(out) / ("model.keras" if task == 0 else f"worker-{task}.keras")
    model.save(target)
    if task != 0:
        target.unlink()
    (Path(out) / f"metrics-{task}.json").write_text(json.dumps(
        {"test_log_likelihood": float(log_p.mean()), "epochs": info["epochs"],
         "replicas": strategy.num_replicas_in_sync}))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def main(fast: bool = False, workers: int = 2) -> dict:
    """Starts ``workers`` processes on localhost, waits for them, returns the chief's metrics."""
    out = tempfile.mkdtemp(prefix="tfp_maf_multi_worker_")
    cluster = {"worker": [f"localhost:{_free_port()}" for _ in range(workers)]}
    processes = []
    for index in range(workers):
        env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3",
               "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})}
        command = [sys.executable, __file__, "--worker", out] + (["--fast"] if fast else [])
        processes.append(subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True))
    for index, process in enumerate(processes):
        _, err = process.communicate(timeout=600)
        if process.returncode != 0:
            raise RuntimeError(f"worker {index} failed:\n{err[-3000:]}")
    metrics = [json.loads((Path(out) / f"metrics-{i}.json").read_text()) for i in range(workers)]
    # The workers hold mirrored weights, so they agree on the test log-likelihood.
    result = {**metrics[0], "workers": workers, "model": str(Path(out) / "model.keras"),
              "worker_log_likelihoods": [m["test_log_likelihood"] for m in metrics]}
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    if "--worker" in sys.argv:
        worker(sys.argv[sys.argv.index("--worker") + 1], "--fast" in sys.argv)
    else:
        main(fast="--fast" in sys.argv)
