"""Print how far kctx's SegNeXt is from the official PyTorch outputs in the fixtures.

Run in kctx's own environment (no PyTorch): ``.venv/bin/python tools/segnext_equivalence.py``.
The fixtures (tests/fixtures/segnext/, written by tools/segnext_fixtures.py with
mmsegmentation 1.2.2) hold official-format checkpoints with random weights and the
official model's outputs; this loads each checkpoint into kctx's model, runs the same
inputs and prints max |kctx − official| / max |official| for the logits and the four
backbone stages. tests/test_segnext.py asserts the same quantities stay below 1e-4.
"""

import pathlib

import keras
import numpy as np

from kctx.models import segnext
from kctx.models.resnet import IMAGENET_MEAN, IMAGENET_STD

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "segnext"
TINY = dict(embed_dims=(16, 32, 64, 96), depths=(1, 1, 2, 1), mlp_ratios=(4, 4, 2, 2))


def relative_error(got, expected):
    return float(np.abs(np.asarray(got, np.float64) - expected).max() / np.abs(expected).max())


def backbone_input(images, padded_shape):
    x = (images - 255 * np.asarray(IMAGENET_MEAN)) / (255 * np.asarray(IMAGENET_STD))
    height, width = (int(s) for s in padded_shape)
    return np.pad(x, [(0, 0), (0, height - x.shape[1]), (0, width - x.shape[2]), (0, 0)]
                  ).astype(np.float32)


def main():
    cases = [("reduced SegNeXt, 70×90 images, logits at input size", "tiny",
              segnext(None, num_classes=7, channels=64, ham_channels=64, rank=8,
                       backbone_options=TINY, weights=FIXTURES / "tiny_mmseg.pth"), "logits"),
             ("SegNeXt-T (4.3 M), 64×64 image, head logits", "mscan_t",
              segnext("t", weights=FIXTURES / "mscan_t_mmseg.pth"), "head_logits")]
    for title, name, model, key in cases:
        outputs = np.load(FIXTURES / f"{name}_outputs.npz")
        if key == "logits":
            got = model.predict(outputs["images"], verbose=0)
        else:
            head = keras.Model(model.inputs, model.get_layer("decode_head.conv_seg").output)
            got = head.predict(outputs["images"], verbose=0)
        stages = model.get_layer("backbone").predict(
            backbone_input(outputs["images"], outputs["padded_shape"]), verbose=0)
        errors = [relative_error(s, outputs[f"stage{i}"]) for i, s in enumerate(stages, 1)]
        print(f"{title}: {key} {relative_error(got, outputs[key]):.2e}; stages "
              + " ".join(f"{e:.2e}" for e in errors))


if __name__ == "__main__":
    main()
