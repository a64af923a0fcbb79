"""keras_models: the paper's models as Keras 3 models (fit, evaluate, save).

Importing the package registers the models with Keras, so that
``keras.saving.load_model("model.keras")`` finds them. (The ``tfp-maf`` command lives
in the top-level package `tfp_maf_cli`, so that its ``--help`` needs no TensorFlow.)

| name | what |
|---|---|
| `MADE`, `MADEMoG`, `MAF`, `MAFMoG`, `RealNVP`, `Gaussian` | the paper's models (`keras_models.zoo`) |
| `NSF` | autoregressive neural spline flows, beyond the paper (`keras_models.zoo`) |
| `build` | a model by its command-line name (``"maf5"``, ...) |
| `DensityModel` | their base: ``log_prob``, ``sample``, ``distribution``, ``export`` |
| `training` | the paper's training: `training.compile_as_paper`, `training.fit_as_paper` |
| `optimizers` | `optimizers.FusedAdam`: Keras' Adam, one op per variable (`compile_as_paper` uses it) |
| `evaluation` | test log-likelihood +- 2 standard errors, bits per pixel |
| `keras_models.data` | the paper's datasets, preprocessed, and their ``tf.data`` pipelines |
| `keras_models.export` | the SavedModel with ``serve``, ``log_prob`` and ``sample`` |

Example:

>>> import keras_models
>>> model = keras_models.MAF(4, num_layers=2, hidden_units=[8])
>>> model.event_size, [made.order for made in model.mades]
(4, ['left-to-right', 'right-to-left'])
"""

from keras_models import evaluation, optimizers, training
from keras_models.density_model import DensityModel
from keras_models.zoo import MADE, MAF, NSF, Gaussian, MADEMoG, MAFMoG, RealNVP, build

__all__ = ["MADE", "MAF", "DensityModel", "Gaussian", "MADEMoG", "MAFMoG", "NSF", "RealNVP", "build", "evaluation",
           "optimizers", "training"]
