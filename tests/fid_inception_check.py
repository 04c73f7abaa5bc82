"""The FID Inception against torch-fidelity's and pytorch-fid's own outputs, on any backend.

Imported by tests/test_fid_inception.py on TensorFlow and by tests/backend_checks.py on
JAX and PyTorch. The fixtures (tests/fixtures/fid_inception/, made by
tools/fid_fixtures.py) hold a random-weight state dict in the official key layout, images
of two sizes, and the official code's network inputs, pool3 features and unbiased logits
under each resize.
"""

import json
import pathlib

import keras
import numpy as np

from kctx.metrics import (FIDInceptionExtractor, fid_inception, frechet_distance,
                          inception_score, kernel_distance, prepare_images)
from kctx.ops.fid_resize import fid_inception_input

FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "fid_inception"
WEIGHTS = FIXTURES / "random_inception.pth"
SETS = ("small", "large")
RESIZES = {"tensorflow": "tensorflow", "pytorch_fid": "pytorch-fid", "clean": "clean"}
# kctx's float32 kernels (oneDNN / XLA) and PyTorch's differ by rounding only, which ~90
# layers of a random-weight network amplify: the error is at most 1e-4 of each output's
# scale (its root mean square), and no single value is off by more than 3e-4 of the
# largest (measured on an AMD EPYC on TensorFlow: up to 3.9e-5 and 9.5e-5).
SCALE_TOLERANCE = 1e-4
PEAK_TOLERANCE = 3e-4


def relative_error(got, expected):
    """‖got − expected‖ / ‖expected‖ (root mean squares): the error relative to the
    output's scale."""
    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    return float(np.linalg.norm(got - expected) / np.linalg.norm(expected))


def peak_error(got, expected):
    """max |got − expected| / max |expected|."""
    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    return float(np.max(np.abs(got - expected)) / np.max(np.abs(expected)))


def fixture_arrays():
    with np.load(FIXTURES / "images.npz") as images, np.load(FIXTURES / "outputs.npz") as out:
        return dict(images), dict(out)


def check_inputs_and_features(network_resizes=tuple(RESIZES), network_sets=SETS):
    """kctx's network inputs equal the official ones for both image sizes and all three
    resizes, and so do its pool3 features and unbiased logits for the resizes in
    ``network_resizes`` and the image sets in ``network_sets`` (the network's run on
    299×299 inputs is most of the time); returns the errors."""
    images, outputs = fixture_arrays()
    errors = {}
    tensorflow = fid_inception(WEIGHTS)  # the public constructor, reading the .pth
    for key, resize in RESIZES.items():
        extractor = FIDInceptionExtractor(tensorflow.model, resize=resize)
        for name in SETS:
            batch = images[name]
            prepared = keras.ops.convert_to_numpy(prepare_images(batch, (0, 255), extractor))
            checked = [("input", prepared[0])]
            if key in network_resizes and name in network_sets:
                features, logits = (keras.ops.convert_to_numpy(v)
                                    for v in extractor.features_and_logits(prepared))
                checked += [("pool3", features), ("logits_unbiased", logits)]
            for what, got in checked:
                expected = outputs[f"{name}_{key}_{what}"]
                error, peak = relative_error(got, expected), peak_error(got, expected)
                errors[f"{name}_{key}_{what}"] = (error, peak)
                assert error <= SCALE_TOLERANCE and peak <= PEAK_TOLERANCE, \
                    (name, key, what, error, peak)
    return errors


def check_metrics():
    """FID, IS and KID of the manifest's NumPy-drawn features equal torch-fidelity's and
    pytorch-fid's values within 1e-3 relative."""
    manifest = json.loads((FIXTURES / "manifest.json").read_text())
    values = manifest["metrics"]
    rng = np.random.default_rng(2026)
    real = rng.standard_normal((500, 64)).astype(np.float32)
    generated = (1.2 * rng.standard_normal((400, 64)) + 0.3).astype(np.float32)
    logits = (3.0 * rng.standard_normal((1000, 1008))).astype(np.float32)
    fid = frechet_distance(real.mean(0), np.cov(real, rowvar=False),
                           generated.mean(0), np.cov(generated, rowvar=False))
    isc, kid = values["isc"], values["kid"]
    checks = [
        ("FID vs torch-fidelity", fid, values["fid"]["torch_fidelity"]),
        ("FID vs pytorch-fid", fid, values["fid"]["pytorch_fid"]),
    ]
    for label, got, expected in (
            ("IS", inception_score(logits, splits=10), isc["splits_10_shuffle_false"]),
            ("IS, torch-fidelity's shuffle",
             inception_score(logits, splits=10, shuffle_seed=2020),
             isc["splits_10_shuffle_true_seed_2020"]),
            ("KID 10 × 100", kernel_distance(real, generated, subsets=10, subset_size=100,
                                             seed=2020), kid["subsets_10_size_100"]),
            ("KID 5 × 400", kernel_distance(real, generated, subsets=5, subset_size=400,
                                            seed=2020), kid["subsets_5_size_400"])):
        checks += [(f"{label} mean", got[0], expected["mean"]),
                   (f"{label} std", got[1], expected["std"])]
    for label, got, expected in checks:
        assert abs(got - expected) <= 1e-3 * abs(expected), (label, got, expected)
    return checks


def check_fid_inception_input_modes():
    """The resize modes differ, and each is its reference code's (a sanity check that a
    mode name cannot silently fall back to another)."""
    images, _ = fixture_arrays()
    batch = images["small"][:1].astype("float32")
    prepared = {mode: keras.ops.convert_to_numpy(fid_inception_input(batch, resize=mode))
                for mode in RESIZES.values()}
    assert len({round(float(np.abs(p).sum()), 3) for p in prepared.values()}) == 3
