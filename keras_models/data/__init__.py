"""Datasets: the paper's Figure 1 density (embedded default)."""

from keras_models.data.toy import Figure1Density

__all__ = ["Figure1Density"]
