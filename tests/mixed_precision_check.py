"""Run by tests/test_runner.py in a subprocess per Keras backend: on TensorFlow, segmentation
(Keras' fit step, whose evaluation rescores under the policy) trains a few steps with
``--dtype-policy mixed_bfloat16``; on every backend, a segmenter's first SGD step under that
policy follows the float32 one.

    KERAS_BACKEND=jax python tests/mixed_precision_check.py RUNS_DIR

The GAN's mixed_bfloat16 runs (its own training step on each backend: TensorFlow's, the
stateless one on JAX, autograd on PyTorch) are the killed and resumed runs of
tests/test_runner.py; classification and sequence train through the same fit step and runner
as segmentation, and every block through the layer battery's mixed_bfloat16 fit step on
every backend (kctx.testing.run_layer_test).
"""

import contextlib
import importlib
import io
import json
import math
import pathlib
import sys

import keras
import numpy as np
from workflow_runs import TINY, assert_saved_in_mixed_bfloat16

from kctx.training import evaluate_run, train_main
from kctx.training.runner import dtype_policy

runs = pathlib.Path(sys.argv[1])
FLAGS = {"segmentation": TINY["segmentation"]} if keras.backend.backend() == "tensorflow" \
    else {}
SCORES = {"segmentation": ("miou",)}

for name, flags in FLAGS.items():
    workflow = importlib.import_module(f"{name}.workflow").WORKFLOW
    directory = runs / name
    argv = [*flags, "--dtype-policy", "mixed_bfloat16", "--verbose", "0",
            "--model-dir", str(directory)]
    assert train_main(workflow, argv) == 0, name
    record = json.loads((directory / "run.json").read_text())
    assert record["config"]["dtype_policy"] == "mixed_bfloat16", record["config"]
    results = json.loads((directory / "results.json").read_text())
    for key in SCORES[name]:
        assert math.isfinite(results[key]), (name, key, results[key])
    for row in (directory / "history.csv").read_text().splitlines()[1:]:
        assert "nan" not in row.lower(), (name, row)
    assert_saved_in_mixed_bfloat16(keras.saving.load_model(directory / "model.keras"), name)
    # evaluate rebuilds nothing: the saved model scores as at the end of training.
    rescored = evaluate_run(workflow, directory, log=lambda *_: None)
    for key in SCORES[name]:
        np.testing.assert_allclose(rescored[key], results[key], rtol=1e-6, err_msg=name)
    # A float32 rerun in the folder is another run: refused, naming the field.
    float32 = [flag for flag in argv if flag not in ("--dtype-policy", "mixed_bfloat16")]
    message = io.StringIO()
    with contextlib.redirect_stderr(message):
        try:
            train_main(workflow, float32)
        except SystemExit as stopped:
            assert stopped.code == 2, (name, stopped.code)
        else:
            raise AssertionError(f"{name}: a float32 rerun of a mixed_bfloat16 run was not "
                                 "refused")
    assert "dtype_policy ('mixed_bfloat16' → 'float32')" in message.getvalue(), message.getvalue()

# One SGD step of the digits_seg segmenter (ResNet-tiny + Ham head) on a training batch under
# each policy, from the same weights. bfloat16 rounds every activation (2⁻⁹ relative), and at
# initialisation the backbone's gradient is that sensitive: in float32, 1e-3 relative noise on
# the images alone turns it by a cosine of 0.97–0.99 per variable. Measured on an AMD EPYC,
# the whole mixed update against the float32 one: cosine 0.75 and 0.86 of its size on
# TensorFlow, 0.94 and 0.95 on JAX; the classifier's 0.9999. A cast that cuts the gradient or
# flips it shows as a variable with no update, a cosine near 0, or a size off by far more.
from segmentation.configs import get_config  # noqa: E402
from segmentation.data import IGNORE_LABEL, training_batches  # noqa: E402
from segmentation.workflow import build_model  # noqa: E402

config = get_config("digits_seg", crop_size=32, head_channels=32)
images, labels = (np.asarray(x) for x in next(iter(training_batches(config))))
updates, start = [], None
for policy in ("float32", "mixed_bfloat16"):
    keras.utils.set_random_seed(0)
    with dtype_policy(policy):
        model = build_model(config)
    if start is None:
        start = [np.array(w) for w in model.get_weights()]
    model.set_weights(start)
    model.compile(keras.optimizers.SGD(1.0), keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, ignore_class=IGNORE_LABEL))
    model.train_on_batch(images, labels)
    updates.append({v.path: (np.array(w) - s).ravel() for w, s, v in zip(
        model.get_weights(), start, model.weights) if v.trainable})


def cosine(a, b):
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


reference, mixed = updates
assert [path for path in reference if np.any(reference[path]) and not np.any(mixed[path])] == []
whole = [np.concatenate(list(update.values())) for update in updates]
ratio = float(np.linalg.norm(whole[1]) / np.linalg.norm(whole[0]))
assert cosine(*whole) > 0.5 and 2 / 3 < ratio < 1.5, (cosine(*whole), ratio)
for path in reference:
    if path.startswith("classifier"):
        assert cosine(reference[path], mixed[path]) > 0.99, (path, cosine(reference[path],
                                                                          mixed[path]))
print(f"MIXED_PRECISION_OK cosine {cosine(*whole):.4f} norm ratio {ratio:.4f}")
