"""keras_models: the paper's models as Keras 3 models (fit, evaluate, save)."""

from keras_models import evaluation, training
from keras_models.density_model import DensityModel
from keras_models.zoo import MADE, MAF, Gaussian, MADEMoG, MAFMoG, RealNVP, build

__all__ = [
    "MADE",
    "MAF",
    "DensityModel",
    "Gaussian",
    "MADEMoG",
    "MAFMoG",
    "RealNVP",
    "build",
    "evaluation",
    "training",
]
