"""``python -m sequence.evaluate --model-dir DIR``: held-out accuracy of a trained sequence model.

Loads ``model.keras`` of a ``sequence.train`` run (or a checkpoint with
``--checkpoint``) and scores the run's held-out sequences (the same seed, so
the same sequences as in training); writes ``evaluation.json`` (or ``--output``).
"""

import functools

from kctx.training import evaluate_main, evaluate_run
from sequence.workflow import WORKFLOW

# evaluate(model_dir, checkpoint=None, output=None, **fields): kctx.training.evaluate_run;
# fields: eval_batch_size.
evaluate = functools.partial(evaluate_run, WORKFLOW)
main = functools.partial(evaluate_main, WORKFLOW)

if __name__ == "__main__":
    raise SystemExit(main())
