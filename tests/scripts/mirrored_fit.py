"""Trains the same MAF on one device and under `tf.distribute.MirroredStrategy`
on two logical CPUs, and prints what `tests/test_distributed.py` checks, as JSON.

It needs a fresh process: logical devices must be set before TensorFlow starts.
Run it as ``python tests/scripts/mirrored_fit.py``.
"""

from __future__ import annotations

import json
import sys


def main() -> dict:
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

    import keras
    import numpy as np

    import keras_models as km
    from keras_models import data, training
    from keras_models.batch_norm_statistics import batch_norm_layers
    from tfp_maf.bijectors.exp_gamma_batch_norm import batch_moments

    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    out = {"replicas": strategy.num_replicas_in_sync}

    # 1. Batch-norm moments inside a replica are those of the global batch,
    #    even when the replicas hold different numbers of rows (40 and 24).
    x = np.random.default_rng(0).normal(size=(64, 3)).astype(np.float32) * [1, 2, 3] + [0, 1, 2]

    def moments():
        i = tf.distribute.get_replica_context().replica_id_in_sync_group
        local = tf.slice(tf.constant(x), [40 * i, 0], [40 - 16 * i, 3])
        return batch_moments(local)

    per_replica = strategy.run(moments)
    out["moments"] = [[t.numpy().tolist() for t in strategy.experimental_local_results(m)] for m in per_replica]
    out["global_moments"] = [x.mean(0).tolist(), x.var(0).tolist()]

    # 2. fit: one device against two replicas, same global batch, weights and order.
    splits = data.load_figure1(n_train=2000, n_val=500, n_test=500, seed=0)

    def run(scope):
        with scope:
            model = km.MAF(2, hidden_units=[32, 32], num_layers=3, seed=0)
            training.compile_as_paper(model, "maf5")
        pipelines = splits.pipelines(batch_size=100, seed=0)
        history, _ = training.fit_as_paper(
            model, pipelines.train, pipelines.validation, splits.x_train, max_epochs=4,
            verbose=0, shuffle_epoch=pipelines.epoch,
        )
        # The statistics fit_as_paper set (under the strategy, for a mirrored model),
        # and those the same weights get from a plain single-device model.
        plain = km.MAF(2, hidden_units=[32, 32], num_layers=3, seed=0)
        plain.set_weights(model.get_weights())
        plain.set_batch_norm_statistics(splits.x_train)
        norms = {name: [(layer.mean.numpy().tolist(), layer.variance.numpy().tolist())
                        for layer in batch_norm_layers(m)] for name, m in (("set", model), ("plain", plain))}
        return {"loss": history.history["loss"], "val_loss": history.history["val_loss"], "norms": norms}

    out["single"] = run(tf.name_scope("single"))
    out["mirrored"] = run(strategy.scope())

    # 3. A plain fit, no callback: the statistics each batch norm stores at the epoch's
    #    end are those of the global batches it normalised. With a step size of 0 both
    #    runs keep the same weights, so the stored figures must agree; one replica's
    #    half of each batch would give others.
    def plain_fit(scope, learning_rate):
        with scope:
            # standardize=False: the first batch norm sees the shifted data itself.
            model = km.MAF(2, hidden_units=[32, 32], num_layers=3, seed=0, standardize=False)
            model.compile(optimizer=keras.optimizers.Adam(learning_rate))
        shifted = splits.x_train + np.float32(5.0)
        model.fit(tf.data.Dataset.from_tensor_slices(shifted).batch(100), epochs=3, verbose=0)
        stored = [(layer.mean.numpy().tolist(), layer.variance.numpy().tolist()) for layer in batch_norm_layers(model)]
        after_fit = float(np.mean(model.log_prob(shifted)))
        model.set_batch_norm_statistics(shifted)
        return {"stored": stored, "log_prob": after_fit, "exact": float(np.mean(model.log_prob(shifted)))}

    out["plain_fit"] = {"single": plain_fit(tf.name_scope("plain"), 0.0),
                        "mirrored": plain_fit(strategy.scope(), 0.0),
                        "mirrored_trained": plain_fit(strategy.scope(), 1e-3)}
    return out


if __name__ == "__main__":
    json.dump(main(), sys.stdout)
