"""`FusedAdam`: Keras' Adam, each variable's update one TensorFlow op.

Keras 3's Adam writes its update in about twenty small ops per variable (the bias
corrections recomputed for each). A flow has tens of variables, so that is most of a
train step's graph: it costs trace and graph-optimisation time before the first step
(about 0.8 s of a small MAF (5)'s first epoch on 2 cores) and an executor dispatch per op
at every step. `FusedAdam` computes the step's scalars once and updates each variable
with `tf.raw_ops.ResourceApplyAdam`, TensorFlow's Adam kernel (on CPU and GPU, and
under XLA).
"""

from __future__ import annotations

import keras
import tensorflow as tf

from tfp_maf._platform.compat import adam_slots

__all__ = ["FusedAdam"]


@keras.saving.register_keras_serializable(package="keras_models")
class FusedAdam(keras.optimizers.Adam):
    """`keras.optimizers.Adam`, updating each variable with one op.

    The same update as Keras' (Kingma & Ba's, as Keras writes it), at step ``t``
    with step size ``lr`` and gradient ``g``::

        m <- m + (1 - beta_1) (g - m)
        v <- v + (1 - beta_2) (g^2 - v)
        w <- w - lr sqrt(1 - beta_2^t) / (1 - beta_1^t) * m / (sqrt(v) + epsilon)

    The same variables, configuration and checkpoints as `keras.optimizers.Adam` (it is
    a subclass): a model saved with one loads with the other. Everything of Keras'
    optimizer around the update (schedules, clipping, weight decay, gradient
    accumulation, EMA) is Keras' own. With ``amsgrad=True``, or for a variable that is
    not a resource variable, the update is Keras' own.

    It takes `keras.optimizers.Adam`'s arguments.

    Example:

    >>> import numpy as np, keras
    >>> from keras_models.optimizers import FusedAdam
    >>> w = keras.Variable(np.ones(3, np.float32))
    >>> ours, keras_adam = FusedAdam(0.1), keras.optimizers.Adam(0.1)
    >>> v = keras.Variable(np.ones(3, np.float32))
    >>> for _ in range(3):
    ...     ours.apply([w * 2.0], [w])
    ...     keras_adam.apply([v * 2.0], [v])
    >>> bool(np.allclose(w.numpy(), v.numpy()))
    True
    """

    def apply(self, grads, trainable_variables=None):
        # The step's scalars, made once per apply (per graph, device and dtype) and
        # dropped after it: no tensor of one trace reaches the next.
        self.__dict__["_step_scalars"] = {}
        try:
            return super().apply(grads, trainable_variables)
        finally:
            self.__dict__["_step_scalars"] = None

    def update_step(self, gradient, variable, learning_rate):
        slots = None if self.amsgrad else adam_slots(self, variable)
        if slots is None or not hasattr(variable, "handle"):
            return super().update_step(gradient, variable, learning_rate)
        m, v = slots
        dtype = variable.dtype
        lr, beta_1_power, beta_2_power, beta_1, beta_2, epsilon = self._scalars(learning_rate, dtype, variable.device)
        tf.raw_ops.ResourceApplyAdam(
            var=variable.handle, m=m.handle, v=v.handle, beta1_power=beta_1_power, beta2_power=beta_2_power,
            lr=lr, beta1=beta_1, beta2=beta_2, epsilon=epsilon, grad=tf.cast(gradient, dtype))

    def _scalars(self, learning_rate, dtype, device):
        cache = self.__dict__.get("_step_scalars")
        key = (tf.compat.v1.get_default_graph(), tf.as_dtype(dtype), device)
        if cache is not None and key in cache:
            return cache[key]
        local_step = tf.cast(self.iterations + 1, dtype)
        # Python floats straight to ``dtype`` (a cast would round them to float32 first).
        beta_1, beta_2, epsilon = (tf.convert_to_tensor(c, dtype) for c in (self.beta_1, self.beta_2, self.epsilon))
        scalars = (tf.cast(learning_rate, dtype), tf.pow(beta_1, local_step), tf.pow(beta_2, local_step),
                   beta_1, beta_2, epsilon)
        if cache is not None:
            cache[key] = scalars
        return scalars
