"""``python -m classification.train``: train a KANet (or a baseline) with ``fit`` and report top-1.

With no arguments: KANet_KV on the embedded digits (scikit-learn's 1,797
real scans: 1,438 for training, 359 held out, upsampled to 32×32 RGB) for a
few minutes on 2 CPU cores; prints the held-out top-1 accuracy and writes
``model.keras``, ``history.csv``, ``history.png`` and ``results.json`` to
``runs/classification-digits-kanet_kv-seed0/``. ``--model`` picks another row
of the paper's Tables 2–4; ``--config imagenet`` is the paper's ImageNet
recipe (TFDS ``imagenet2012`` from its manual download); ``cifar10`` and
``imagenette`` read TFDS. Every config field is a flag (``--epochs``,
``--batch-size``, ``--learning-rate``, ...). Runs resume from their run
folder where they stopped, under any ``tf.distribute`` strategy (``--tpu``
for a TPU, ``TF_CONFIG`` for several workers).

``--backbone resnet50 --context poly_nl --at res4`` trains a ResNet-50
(``keras.applications``, random initialisation) with a context block inserted
before the last residual block of res4 (or of several stages, ``--at
res3+4+5``) by :func:`kctx.models.insert_context_block`: the Poly-NL paper's
classification experiment (Sec. 5.3).
"""

import functools

from classification.workflow import WORKFLOW
from kctx.training import run, train_main

# train(config=None, model=None, **options): kctx.training.run for this workflow.
train = functools.partial(run, WORKFLOW)
main = functools.partial(train_main, WORKFLOW, description=__doc__)

if __name__ == "__main__":
    raise SystemExit(main())
