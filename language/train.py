"""``python -m language.train [--config stdlib] [--mixer causal_hamburger|attention|linear_attention|causal_conv]``.

Trains a decoder-only character model (:class:`kctx.models.CausalLanguageModel`, 4 blocks of
128 channels) on the Python standard library's own sources (pinned files, every tenth held
out; no download) with the token mixer ``--mixer``, and scores the held-out files in bits
per character. Batch k is a function of (seed, k), checkpoints every ``--checkpoint-every``
steps, a rerun resumes. Writes ``results.json`` (with the corpus's SHA-256), ``history.csv``
and ``model.keras`` to ``runs/language-<config>-<mixer>-<T>-seed0/``;
``python -m language.generate --model-dir DIR --prompt "def "`` continues a prompt.
"""

import functools

from kctx.training import run, train_main
from language.workflow import WORKFLOW

# train(config=None, mixer=None, **options): kctx.training.run for this workflow.
train = functools.partial(run, WORKFLOW)
main = functools.partial(train_main, WORKFLOW, description=__doc__)

if __name__ == "__main__":
    raise SystemExit(main())
