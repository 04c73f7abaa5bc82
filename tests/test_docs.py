"""The docs: the site builds with warnings as errors, the API reference lists every public
name, the docstring examples and the docs pages' Python blocks run, and the distribution
installs no import name but ``kctx``."""

import importlib
import importlib.util
import os
import pathlib
import pkgutil
import re
import shutil
import subprocess
import sys
import zipfile

import keras
import numpy as np
import pytest

import kctx

ROOT = pathlib.Path(__file__).parents[1]
DOCS = ROOT / "docs"
sys.path.insert(0, str(ROOT / "tools"))
from api_pages import INTRODUCTIONS, page as api_page  # noqa: E402  (tools/ is not a package)
from docstring_examples import run_docstring_examples  # noqa: E402


def _resolve(path):
    """The object at a dotted path: the longest importable module prefix, then attributes."""
    parts = path.split(".")
    for split in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for part in parts[split:]:
            obj = getattr(obj, part)
        return obj
    raise ImportError(path)


@pytest.mark.parametrize("module_name", sorted(INTRODUCTIONS))
def test_api_reference_lists_every_public_name(module_name):
    """Each name of the module's ``__all__`` has an entry on its API page (by the path where it
    is defined, or its public path) that resolves to the very object, and nothing else does."""
    module = importlib.import_module(module_name)
    page = DOCS / "api" / f"{module_name.split('.')[1]}.md"
    entries = re.findall(r"^::: ([\w.]+)\s*$", page.read_text(), re.M)
    documented = {path.rsplit(".", 1)[1]: path for path in entries}
    missing = [name for name in module.__all__ if name not in documented]
    stale = [path for name, path in documented.items() if name not in module.__all__]
    assert not missing, (f"{module_name} names missing from its API page (run "
                         f"`python tools/api_pages.py`): {missing}")
    assert not stale, f"{module_name}: API entries that are not public names: {stale}"
    for name, path in documented.items():
        assert _resolve(path) is getattr(module, name), (path, name)
    assert page.read_text() == api_page(module_name), "run `python tools/api_pages.py`"


def test_every_public_module_has_an_api_page():
    public = {f"kctx.{m.name}" for m in pkgutil.iter_modules(kctx.__path__)
              if not m.name.startswith("_") and m.name not in ("arguments", "bench", "validation")}
    assert public == set(INTRODUCTIONS), public ^ set(INTRODUCTIONS)


def test_docstring_examples_run(tmp_path, monkeypatch):
    """Every ``>>>`` example of the package runs on TensorFlow and prints what it says
    (``keras`` and ``np`` are in scope, as in Keras's own doctests; files land in a
    temporary folder). Examples that need a file kctx cannot ship say ``+SKIP``.
    tests/backend_checks.py runs them on PyTorch."""
    monkeypatch.chdir(tmp_path)
    failures, attempted, skipped = run_docstring_examples()
    assert not failures, "\n".join(failures)[:20000]
    assert attempted >= 100 and skipped <= 10, (attempted, skipped)


def _python_blocks(text):
    return re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)


@pytest.mark.parametrize("page", sorted(p.relative_to(DOCS).as_posix()
                                        for p in DOCS.rglob("*.md")
                                        if _python_blocks(p.read_text())))
def test_docs_python_blocks_run(page, tmp_path, monkeypatch):
    """A page's ```python blocks run in order in one namespace (shell commands and output
    are ```text / ```bash blocks, which are not run)."""
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "docs_page"}
    for block in _python_blocks((DOCS / page).read_text()):
        exec(compile(block, f"docs/{page}", "exec"), namespace)  # noqa: S102 - our docs


def test_docs_site_builds_strict(tmp_path):
    """`mkdocs build --strict`: a broken link, a missing page, an unresolved reference or a
    docstring the API reference cannot parse fails; the equations are MathML."""
    site = tmp_path / "site"
    completed = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert completed.returncode == 0, completed.stderr[-5000:]
    hamburger = (site / "operators" / "hamburger" / "index.html").read_text()
    assert "<math" in hamburger and "kctxmath" not in hamburger
    layers = (site / "api" / "layers" / "index.html").read_text()
    assert 'id="kctx.layers.hamburger.Hamburger"' in layers
    assert "parallel global attention path" in layers  # a docstring assembled at import
    assert ":func:`" not in layers and ":class:`" not in layers


def test_wheel_installs_only_the_kctx_package(tmp_path):
    """Built from the repository, the wheel's only top-level import name is ``kctx``: the
    workflow folders stay in the checkout and take no name other distributions own."""
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "runs", "site", "build", "*.egg-info", "__pycache__", "results"))
    completed = subprocess.run(
        [sys.executable, "-c", "import sys; from setuptools import build_meta; "
         "print(build_meta.build_wheel(sys.argv[1]))", str(tmp_path / "dist")],
        cwd=source, capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-5000:]
    wheel = tmp_path / "dist" / completed.stdout.split()[-1]
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        top_level_txt = next(n for n in names if n.endswith(".dist-info/top_level.txt"))
        declared = archive.read(top_level_txt).decode().split()
    top = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert top == {"kctx"}, top
    assert declared == ["kctx"], declared
    assert "kctx/layers/hamburger.py" in names and "kctx/training/runner.py" in names


def _hook(name):
    spec = importlib.util.spec_from_file_location(f"docs_hook_{name}", DOCS / "hooks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_lists_hook_reindents_commonmark_lists_for_python_markdown():
    source = ("- one\n  continued\n  - nested\n\n  | a | b |\n  | - | - |\n  | 1 | 2 |\n\n"
              "  ```python\n  if x:\n      y = 1\n  ```\n- two\n\nafter\n")
    assert _hook("lists").indent_lists(source) == (
        "- one\n    continued\n    - nested\n\n    | a | b |\n    | - | - |\n    | 1 | 2 |\n\n"
        "    ```python\n    if x:\n        y = 1\n    ```\n\n- two\n\nafter\n")


def test_math_hook_turns_tex_into_mathml_and_leaves_code_alone():
    math = _hook("math")
    page = type("Page", (), {"file": type("File", (), {"src_uri": "x.md"})()})()
    markdown = "Cost $O(n^2)$, `$not math$`.\n\n$$\nY = W_u X\n$$\n\n```text\n$HOME\n```\n"
    converted = math.on_page_markdown(markdown, page=page)
    assert "`$not math$`" in converted and "$HOME" in converted and "$O(n^2)$" not in converted
    html = math.on_page_content(f"<p>{converted}</p>".replace("\n\n", "</p><p>"), page=page)
    assert html.count("<math") == 2 and 'display="block"' in html and "kctxmath" not in html
    with pytest.raises(ValueError, match=r"does not know \\foo"):
        math.on_page_markdown("$\\foo x$", page=page)
