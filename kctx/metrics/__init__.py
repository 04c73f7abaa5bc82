"""Metrics for generative models: streaming FID / FCD and the classifier score."""

from kctx.metrics.classifier_score import ClassifierScore, classifier_score
from kctx.metrics.extractors import (
    Extractor,
    digits_classifier,
    get_extractor,
    inception_v3,
    prepare_images,
)
from kctx.metrics.frechet import FrechetInceptionDistance, frechet_distance

__all__ = [
    "ClassifierScore",
    "Extractor",
    "FrechetInceptionDistance",
    "classifier_score",
    "digits_classifier",
    "frechet_distance",
    "get_extractor",
    "inception_v3",
    "prepare_images",
]
