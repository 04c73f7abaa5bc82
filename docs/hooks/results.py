"""MkDocs hook: the studies' committed figures (``studies/results/*.png``) are part of the site
as ``results/<name>.png``, so the studies page shows them without a second copy in ``docs/``."""

import pathlib

from mkdocs.structure.files import File

RESULTS = pathlib.Path(__file__).resolve().parents[2] / "studies" / "results"


def on_files(files, config, **kwargs):
    for path in sorted(RESULTS.glob("*.png")):
        files.append(File.generated(config, f"results/{path.name}", abs_src_path=str(path)))
    return files
