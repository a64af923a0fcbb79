"""keras_models: the paper's models as Keras 3 models (fit, evaluate, save).

Importing the package registers the models with Keras, so that
``keras.saving.load_model("model.keras")`` finds them. (The ``tfp-maf`` command lives
in the top-level module `tfp_maf_cli`, so that its ``--help`` needs no TensorFlow.)
"""

from keras_models import evaluation, training
from keras_models.density_model import DensityModel
from keras_models.zoo import MADE, MAF, Gaussian, MADEMoG, MAFMoG, RealNVP, build

__all__ = ["MADE", "MAF", "DensityModel", "Gaussian", "MADEMoG", "MAFMoG", "RealNVP", "build", "evaluation",
           "training"]
