#!/usr/bin/env python
"""Write the ADE20K test-pipeline fixtures: mmsegmentation's own keep-ratio resize of
synthetic images, for checking :func:`segmentation.data.rescale_keep_ratio`.

Run with an environment that has mmsegmentation 1.x, mmcv (mmcv-lite is enough),
mmengine and OpenCV (never kctx's)::

    python tools/ade20k_pipeline_fixtures.py

It draws a handful of synthetic uint8 RGB images of odd sizes (smaller and larger
than the (2048, 512) scale, portrait, landscape and a panorama bound by the long
side; flat regions, sharp edges, gradients and a noisy patch), writes them as PNGs,
and runs the first two transforms of the official ADE20K ``test_pipeline`` on the
files (``LoadImageFromFile`` then ``Resize(scale=(2048, 512), keep_ratio=True)``,
built from mmseg's ``configs/_base_/datasets/ade20k.py`` through its registry). It
writes to ``tests/fixtures/ade20k_pipeline/`` (``--out``):

* ``<name>.png`` -- the input images (RGB);
* ``<name>_mmseg.png`` -- mmseg's resized image, converted from its BGR to RGB (not
  written when it equals the input: the image already at the scale);
* ``manifest.json`` -- per image its size, mmseg's ``img_shape`` and ``scale_factor``,
  and the package versions.

Deterministic: rerunning writes identical files.
"""

import argparse
import json
import os
from pathlib import Path

import numpy as np

from official_mmseg import install_mmcv_ext_stub

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO_ROOT / "tests" / "fixtures" / "ade20k_pipeline"
SEED = 20240611
# name → (height, width): upscaled tiny images, a mid-size one, downscaled large ones,
# one already at the scale and a panorama whose long side binds.
IMAGES = {
    "tiny_landscape": (37, 53),
    "tiny_portrait": (61, 29),
    "mid_landscape": (333, 517),
    "large_landscape": (640, 977),
    "large_portrait": (1203, 611),
    "at_scale": (512, 700),
    "panorama": (150, 2500),
}


def synthetic_image(height, width, rng):
    """A flat background with flat rectangles of random colours, a colour ramp in one
    ninth and a small noisy patch: edges, a gradient and texture for the
    interpolations to differ on, in little PNG space."""
    image = np.empty((height, width, 3), np.float64)
    image[:] = rng.integers(0, 256, 3)
    for _ in range(8):
        top, left = rng.integers(0, height), rng.integers(0, width)
        bottom = min(height, top + rng.integers(1, max(2, height // 2)))
        right = min(width, left + rng.integers(1, max(2, width // 2)))
        image[top:bottom, left:right] = rng.integers(0, 256, 3)
    ramp_h, ramp_w = max(1, height // 3), max(1, width // 3)
    y, x = np.mgrid[0:ramp_h, 0:ramp_w]
    image[height - ramp_h:, :ramp_w] = np.stack(
        [255 * x / max(ramp_w - 1, 1), 255 * y / max(ramp_h - 1, 1),
         255 * (x + y) / max(ramp_w + ramp_h - 2, 1)], axis=-1)
    patch_h, patch_w = max(1, height // 8), max(1, width // 8)
    image[:patch_h, -patch_w:] = rng.integers(0, 256, (patch_h, patch_w, 3))
    return np.clip(np.round(image), 0, 255).astype(np.uint8)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    install_mmcv_ext_stub()
    import cv2
    import mmcv
    import mmengine
    import mmseg
    from mmengine.config import Config
    from mmseg.registry import TRANSFORMS
    from mmseg.utils import register_all_modules

    register_all_modules()
    config = Config.fromfile(os.path.join(os.path.dirname(mmseg.__file__), ".mim", "configs",
                                          "_base_", "datasets", "ade20k.py"))
    load, resize = (TRANSFORMS.build(step) for step in config.test_pipeline[:2])
    assert type(resize).__name__ == "Resize" and tuple(resize.scale) == (2048, 512)
    args.out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)
    manifest = {"pipeline": [dict(step) for step in config.test_pipeline[:2]],
                "versions": {"mmseg": mmseg.__version__, "mmcv": mmcv.__version__,
                             "mmengine": mmengine.__version__, "opencv": cv2.__version__,
                             "numpy": np.__version__},
                "images": {}}
    for name, (height, width) in IMAGES.items():
        image = synthetic_image(height, width, rng)
        path = args.out / f"{name}.png"
        cv2.imwrite(str(path), image[..., ::-1])  # RGB on disk
        results = resize(load({"img_path": str(path)}))
        resized = results["img"][..., ::-1]  # mmseg keeps BGR
        identity = resized.shape == image.shape and np.array_equal(resized, image)
        if not identity:  # at the scale already: mmseg's output is the input
            cv2.imwrite(str(args.out / f"{name}_mmseg.png"), resized[..., ::-1])
        manifest["images"][name] = {
            "size": [height, width], "img_shape": list(results["img_shape"]),
            "scale_factor": [float(v) for v in results["scale_factor"]],
            "mmseg_output": f"{name}.png" if identity else f"{name}_mmseg.png"}
        print(f"{name}: {height}×{width} → {results['img_shape']}")
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    total = sum(path.stat().st_size for path in args.out.iterdir())
    print(f"wrote {args.out} ({total:,} bytes)")


if __name__ == "__main__":
    main()
