"""``python -m language.export --model-dir DIR --format tf_saved_model|onnx|litert [--quantize none|dynamic|int8] [--output PATH]``.

Exports a ``language.train`` run's model (token ids (batch, T) → next-character logits,
:func:`kctx.training.export.export_run`), reloads the artifact in its runtime and prints its
largest difference from Keras on windows of the corpus.
"""

import functools

from kctx.training import export_main, export_run
from language.workflow import WORKFLOW

# export(model_dir, format, quantize="none", output=None, ...): kctx.training.export.export_run
export = functools.partial(export_run, WORKFLOW)
main = functools.partial(export_main, WORKFLOW)

if __name__ == "__main__":
    raise SystemExit(main())
