"""``python -m gan.train``: train a class-conditional GAN with a kctx context block.

With no arguments: the ``digits`` config (scikit-learn's real digits, 32×32)
with the Hamburger NMF block in G and D, a budget of about 10 minutes on 2
CPU cores, then the Fréchet classifier distance (FCD) and classifier score of
2,000 generated digits and a sample grid PNG, in
``runs/gan-digits-ham_nmf-seed0/``. Other configs read TFDS datasets
(``--data-dir``, ``--download``) and report FID with InceptionV3; runs that
keep an EMA of G sample and score with it. Every config field is a flag
(``--context self_attention``, ``--steps``, ``--batch-size``, ...); a rerun
resumes from the run folder's newest checkpoint.
"""

import functools

from gan.workflow import WORKFLOW
from kctx.training import run, train_main

# train(config=None, context=None, **options): kctx.training.run for this workflow.
train = functools.partial(run, WORKFLOW)
main = functools.partial(train_main, WORKFLOW, description=__doc__)

if __name__ == "__main__":
    raise SystemExit(main())
