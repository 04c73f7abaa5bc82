"""``python -m sequence.train [--config adding] [--length 1024] [--model psf]``: train, score.

Trains the authors' PSF-Attn network (``--model psf``) or their Transformer
baseline of the same embedding width (``--model transformer``) on the Adding
or Temporal Order task of Khalitov et al. (Sec. 5.2) with Adam (lr 1e-3,
batch 40, the paper's settings), on fresh batches generated from (seed,
step), with a Keras progress bar. ``--config listops|text|image|pathfinder``
trains on a Long Range Arena task instead (Sec. 5.3; local files or TFDS under
``--data-dir``, scored on its test split). Every ``--eval-every`` steps the
model is scored on 5,000 held-out sequences (and checkpointed); training
stops at ``--steps`` or once the held-out accuracy reaches
``--target-accuracy``. Writes ``results.json``, ``history.csv`` and
``model.keras`` to ``runs/sequence-<config>-<model>-<length>-seed0/``; a
rerun resumes there.
"""

import functools

from kctx.training import run, train_main
from sequence.workflow import WORKFLOW

# train(config=None, model=None, **options): kctx.training.run for this workflow.
train = functools.partial(run, WORKFLOW)
main = functools.partial(train_main, WORKFLOW, description=__doc__)

if __name__ == "__main__":
    raise SystemExit(main())
