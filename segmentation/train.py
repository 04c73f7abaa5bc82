"""``python -m segmentation.train``: train a HamNet-style segmenter with ``fit``; report mIoU.

With no arguments: the ``digits_seg`` config (canvases of scikit-learn's real
digit scans, 11 classes) with the Hamburger NMF head on a small dilated
ResNet, a few minutes on 2 CPU cores. Prints the validation mIoU and pixel
accuracy (ignore label 255 excluded) and writes ``model.keras`` and
``results.json`` to ``runs/segmentation-digits_seg-ham_nmf-seed0/``. SGD with
momentum 0.9, weight decay 1e-4 and the poly learning rate (1 −
step/steps)^0.9; random flip, rescale and crop. Every config field is a flag
(``--context aspp``, ``--steps``, ``--crop-size``, ...). Runs resume from their
run folder and train under any ``tf.distribute`` strategy (batch norm
synchronised across replicas).

``--config voc`` (HamNet's PASCAL VOC recipe), ``voc_fast``, ``ade20k``, ``pets``
or ``scene_parse150`` train on real data found with ``--data-dir``
(``segmentation.data``). ``--config segnext_ade20k`` / ``segnext_cityscapes`` train
SegNeXt (MSCAN-T; ``--backbone mscan_s`` / ``_b`` / ``_l``) with the official recipe:
AdamW (head ×10, norms undecayed), 1,500 warm-up steps then poly, RandomResize,
RandomCrop with cat_max_ratio 0.75, flip and photometric distortion, evaluated with the
official test pipeline; ``segnext_digits`` trains SegNeXt-T from scratch on digits_seg.
"""

import functools

from kctx.training import run, train_main
from segmentation.workflow import WORKFLOW

# train(config=None, context=None, **options): kctx.training.run for this workflow.
train = functools.partial(run, WORKFLOW)
main = functools.partial(train_main, WORKFLOW, description=__doc__)

if __name__ == "__main__":
    raise SystemExit(main())
