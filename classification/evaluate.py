"""``python -m classification.evaluate --model-dir DIR``: top-1 / top-5 of a trained classifier.

Loads ``model.keras`` of a ``classification.train`` run (or a checkpoint with
``--checkpoint``) and scores the config's held-out split, every example
once; writes ``evaluation.json`` (or ``--output``).
"""

from classification.workflow import WORKFLOW

# evaluate(model_dir, checkpoint=None, output=None, **fields): kctx.training.evaluate_run;
# fields: eval_batch_size.
evaluate = WORKFLOW.rescore
main = WORKFLOW.evaluate_main

if __name__ == "__main__":
    raise SystemExit(main())
