"""``python -m segmentation.evaluate --model-dir DIR [--eval-multi-scale] [--eval-flip]
[--eval-ham-steps K] [--eval-resize LONG,SHORT] [--eval-mode whole|slide --eval-crop C
--eval-stride S]``: mIoU.

Reads the run's ``run.json`` and ``model.keras`` (written by
``segmentation.train`` or ``segmentation.convert``), scores the held-out split (mIoU and pixel accuracy,
label 255 ignored), single-scale or with the paper's test protocol
(``--eval-multi-scale --eval-flip``: softmax scores averaged over input
scales 0.5–1.75 and their mirror images, Appendix E.3), after the run's resize
(SegNeXt's ADE20K runs: mmseg's keep-ratio Resize to (2048, 512), logits resized back)
on whole images or sliding windows (Cityscapes: 1024² at stride 768), and writes
colourised predictions of the first images as ``predictions*.png`` and the
scores to ``evaluation.json`` (or ``--output``).
"""

import functools

from kctx.training import evaluate_main, evaluate_run
from segmentation.workflow import WORKFLOW

# evaluate(model_dir, checkpoint=None, output=None, **fields): kctx.training.evaluate_run;
# fields: eval_multi_scale, eval_flip, eval_images, eval_size, eval_ham_steps, eval_resize,
# eval_mode, eval_crop, eval_stride, prediction_images.
evaluate = functools.partial(evaluate_run, WORKFLOW)
main = functools.partial(evaluate_main, WORKFLOW)

if __name__ == "__main__":
    raise SystemExit(main())
