"""``python -m language.evaluate --model-dir DIR``: bits per character of a trained model.

Loads ``model.keras`` of a ``language.train`` run (or a checkpoint with ``--checkpoint``) and
scores the held-out files; writes ``evaluation.json`` (or ``--output``).
"""

import functools

from kctx.training import evaluate_main, evaluate_run
from language.workflow import WORKFLOW

# evaluate(model_dir, checkpoint=None, output=None, **fields): kctx.training.evaluate_run;
# fields: eval_characters, eval_batch_size.
evaluate = functools.partial(evaluate_run, WORKFLOW)
main = functools.partial(evaluate_main, WORKFLOW)

if __name__ == "__main__":
    raise SystemExit(main())
