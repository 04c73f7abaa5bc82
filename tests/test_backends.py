"""kctx.ops, kctx.layers, kctx.models and kctx.metrics on JAX and PyTorch, without TensorFlow.

Keras picks its backend at import, so each backend's checks run in a pytest subprocess
with ``KERAS_BACKEND`` set, in a process where TensorFlow cannot be imported
(tests/without_tensorflow.py), as in an install of kctx without it: tests/backend_checks.py
(the layer battery, on JAX over 2 virtual CPU devices, the ops against their NumPy references, the FID Inception, IS, KID and FID's streaming
sums against the official code) and tests/test_segnext.py (SegNeXt's official checkpoints
and the official model's outputs). Not run here: the keys of the real L and B variants (49 M
and 28 M parameter models built to check a mapping that no backend touches: TensorFlow's);
on JAX, where each new shape is an XLA compile, the SegNeXt tests that repeat another's
check at a larger size, for another head or another file (SegNeXt-T's outputs after the
tiny model's, the original key layout after mmseg's, the whole-model training step at three
sizes and in bfloat16, another context block in the head, the real T and S keys, the
mismatch messages, the Keras weights round trip, the dotted ``.keras`` file that PyTorch is
the reason for, the ImageNet classifier's head after the ImageNet backbone's checkpoint):
about 180 s there, measured beside other work.
"""

import pytest

from workflow_runs import ROOT, run_pytest_on

TESTS = ROOT / "tests"
NOT_HERE = {
    "jax": "not any_size_training_step and not another_context_block and not segnext_t_equals "
           "and not real_variants_maps and not dotted_names and not tiny_original "
           "and not does_not_fit and not round_trip and not mscan_classifier_reads",
    "torch": "",
}
TENSORFLOW_ONLY = "not (real_variants_maps and (-l or -b)) and not original_layout_b_and_l"


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_layers_models_and_metrics_without_tensorflow(backend):
    selection = " and ".join(filter(None, [TENSORFLOW_ONLY, NOT_HERE[backend]]))
    output = run_pytest_on(backend, [TESTS / "backend_checks.py", TESTS / "test_segnext.py"],
                           selection)
    assert " passed" in output and " failed" not in output and " skipped" not in output


def test_tensorflow_is_an_extra_of_what_needs_it():
    """``pip install kctx`` brings Keras, NumPy and SciPy: a JAX or PyTorch user adds their
    backend's extra, and TensorFlow comes with the extras of the workflows, exports,
    datasets and benchmarks that use tf.data or TensorFlow's strategies."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = [requirement.split("[")[0].split(">")[0].split("=")[0].split("<")[0]
             for requirement in project["dependencies"]]
    assert "tensorflow" not in names and "keras" in names
    extras = project["optional-dependencies"]
    for extra in ("tensorflow", "gan", "classification", "segmentation", "studies", "export",
                  "datasets", "bench", "test"):
        assert any(requirement.startswith("tensorflow>=") for requirement in extras[extra]), \
            extra
    assert extras["jax"] == ["jax>=0.4.30"] and extras["torch"] == ["torch>=2.4"]
    # ONNX export on PyTorch (torch.onnx, ONNX Runtime) needs no TensorFlow.
    assert not any(requirement.startswith("tensorflow") for requirement in extras["onnx"])
