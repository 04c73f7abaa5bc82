"""Metrics for generative models: FID / IS / KID with the field's Inception network
(or the digits classifier: FCD), streamed, and reference statistics files."""

from kctx.metrics.classifier_score import ClassifierScore, classifier_score, inception_score
from kctx.metrics.extractors import (
    EXTRACTORS,
    Extractor,
    FIDInceptionExtractor,
    digits_classifier,
    fid_inception,
    get_extractor,
    inception_v3,
    prepare_images,
)
from kctx.metrics.folder import image_batches
from kctx.metrics.frechet import FrechetInceptionDistance, frechet_distance
from kctx.metrics.generative import GenerativeMetrics
from kctx.metrics.kernel_distance import kernel_distance
from kctx.metrics.reference import (
    ReferenceStatistics,
    load_reference_statistics,
    save_reference_statistics,
)

__all__ = [
    "EXTRACTORS",
    "ClassifierScore",
    "Extractor",
    "FIDInceptionExtractor",
    "FrechetInceptionDistance",
    "GenerativeMetrics",
    "ReferenceStatistics",
    "classifier_score",
    "digits_classifier",
    "fid_inception",
    "frechet_distance",
    "get_extractor",
    "image_batches",
    "inception_score",
    "inception_v3",
    "kernel_distance",
    "load_reference_statistics",
    "prepare_images",
    "save_reference_statistics",
]
