"""``python -m gan.evaluate --model-dir DIR [--eval-samples N]``: FID / FCD of a trained generator.

Loads the sampling generator of a ``gan.train`` run (``generator.keras``; or
the newest checkpoint with ``--checkpoint latest``, e.g. while the run is
still training), draws N samples with uniformly sampled classes (default:
the run's ``eval_samples``; the paper uses 50,000) and compares them with the
config's evaluation split. The extractor is named in every report: the
digits classifier (FCD) for ``digits``, InceptionV3 pool features (FID)
otherwise. Writes ``evaluation.json`` (or ``--output``).
"""

from gan.workflow import WORKFLOW

# evaluate(model_dir, checkpoint=None, output=None, **fields): kctx.training.evaluate_run;
# fields: eval_samples, eval_real, extractor, extractor_weights.
evaluate = WORKFLOW.rescore
main = WORKFLOW.evaluate_main

if __name__ == "__main__":
    raise SystemExit(main())
