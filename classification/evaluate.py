"""``python -m classification.evaluate --model-dir DIR``: top-1 / top-5 of a trained classifier.

Loads ``model.keras`` of a ``classification.train`` run (or a checkpoint with
``--checkpoint``) and scores the config's held-out split, every example
once; writes ``evaluation.json`` (or ``--output``).
"""

import functools

from classification.workflow import WORKFLOW
from kctx.training import evaluate_main, evaluate_run

# evaluate(model_dir, checkpoint=None, output=None, **fields): kctx.training.evaluate_run;
# fields: eval_batch_size.
evaluate = functools.partial(evaluate_run, WORKFLOW)
main = functools.partial(evaluate_main, WORKFLOW)

if __name__ == "__main__":
    raise SystemExit(main())
