"""The README's set-up commands and example stay true."""

import pathlib
import re

import keras
import numpy as np

ROOT = pathlib.Path(__file__).parents[1]
README = (ROOT / "README.md").read_text()


def _blocks(language):
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.S)


def test_exactly_two_setup_commands_and_ci_runs_the_second():
    commands = [b.strip() for b in _blocks("bash")]
    assert len(commands) == 2, commands
    assert all("\n" not in c for c in commands)
    assert "gan.train" in commands[0]
    assert "pytest" in commands[1]
    assert commands[1] in (ROOT / ".ci" / "run").read_text()


def test_readme_is_short_and_links_only_existing_pages():
    assert len(README.splitlines()) <= 200
    for target in re.findall(r"\]\((docs/[^)#]+)", README):
        assert (ROOT / target).is_file(), target


def test_example_builds_and_trains():
    (example,) = _blocks("python")
    assert len(example.strip().splitlines()) <= 10
    namespace = {}
    exec(example, namespace)  # noqa: S102 - the README's own code
    model = namespace["model"]
    x = np.random.default_rng(0).standard_normal((4, 32, 32, 3)).astype("float32")
    history = model.fit(x, np.arange(4), epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    assert isinstance(model, keras.Model)


def test_export_example_runs_on_the_example_model(tmp_path, monkeypatch):
    """docs/shipping.md's export example, on the README's model: the ONNX artifact computes
    what the model computes."""
    import pytest

    pytest.importorskip("onnxruntime")
    (example,) = _blocks("python")
    shipping = (ROOT / "docs" / "shipping.md").read_text()
    export = re.findall(r"```python\n(.*?)```", shipping, flags=re.S)[1]
    namespace = {}
    exec(example, namespace)  # noqa: S102 - the README's own code
    monkeypatch.chdir(tmp_path)
    exec(export, namespace)  # noqa: S102
    assert (tmp_path / "model.onnx").exists() and (tmp_path / "model_int8.tflite").exists()
    images = namespace["images"]
    np.testing.assert_allclose(namespace["logits"], namespace["model"].predict(images, verbose=0),
                               rtol=1e-4, atol=1e-5)
