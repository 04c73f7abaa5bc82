"""``python -m gan.evaluate --model-dir DIR [--eval-samples N] [--fid-weights PTH]``: FID / IS / KID.

Loads the sampling generator of a ``gan.train`` run (``generator.keras``; or
the newest checkpoint with ``--checkpoint latest``, e.g. while the run is
still training), draws N samples with uniformly sampled classes (default:
the run's ``eval_samples``; the papers use 50,000) and compares them with the
config's evaluation split, or with ``--fid-reference STATS.npz`` (written there from
the split when the file does not exist yet). The extractor is named in every report:
the digits classifier (FCD, classifier score, KID) for ``digits``; otherwise the FID
Inception (FID, IS, KID as published), which needs ``--fid-weights`` (pytorch-fid's or
torch-fidelity's file), with its resize (``--fid-resize tensorflow``: the papers') and
the weights file's SHA-256. Writes ``evaluation.json`` (or ``--output``).
"""

import functools

from gan.workflow import WORKFLOW
from kctx.training import evaluate_main, evaluate_run

# evaluate(model_dir, checkpoint=None, output=None, **fields): kctx.training.evaluate_run;
# fields: eval_samples, eval_real, extractor, extractor_weights, fid_weights, fid_resize,
# fid_reference.
evaluate = functools.partial(evaluate_run, WORKFLOW)
main = functools.partial(evaluate_main, WORKFLOW)

if __name__ == "__main__":
    raise SystemExit(main())
