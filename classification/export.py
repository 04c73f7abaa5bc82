"""``python -m classification.export --model-dir DIR --format tf_saved_model|onnx|litert [--quantize none|dynamic|int8] [--output PATH]``.

Exports a ``classification.train`` run's model (:func:`kctx.training.export.export_run`),
reloads the artifact in its runtime and prints its largest difference from Keras on
inputs from the workflow's data and the artifact's held-out top-1 / top-5.
"""

import functools

from classification.workflow import WORKFLOW
from kctx.training import export_main, export_run

# export(model_dir, format, quantize="none", output=None, ...): kctx.training.export.export_run
export = functools.partial(export_run, WORKFLOW)
main = functools.partial(export_main, WORKFLOW)

if __name__ == "__main__":
    raise SystemExit(main())
