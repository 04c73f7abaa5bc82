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


def _sections(text):
    """The text before the first ``## `` title, then each ``## `` section by its title, with
    the README's links into ``docs/`` written as the docs site's."""
    parts = re.split(r"(?m)^(?=## )", text.replace("](docs/", "]("))
    return {"": parts[0], **{part.splitlines()[0][3:]: part for part in parts[1:]}}


def test_the_docs_site_says_what_the_readme_says():
    """The site's home page is the README but for its set-up commands (Getting started's) and
    its paragraph on the docs (the site's own); Getting started repeats the set-up and the
    example, then goes on. A finding or a number changed in one place and not the other fails here."""
    readme = _sections(README)
    index = _sections((ROOT / "docs" / "index.md").read_text())
    getting_started = _sections((ROOT / "docs" / "getting-started.md").read_text())
    own = {"Set-up on a fresh machine": "Start here", "Documentation": "This site"}
    assert list(index) == [own.get(title, title) for title in readme]
    for title, text in readme.items():
        if title not in own:
            assert index[title] == text, title
    assert getting_started["Set-up on a fresh machine"] == readme["Set-up on a fresh machine"]
    assert getting_started["Example"].startswith(readme["Example"].rstrip())


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
