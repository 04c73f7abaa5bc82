"""Write the API reference pages of the docs (``docs/api/<module>.md``) from ``__all__``.

    python tools/api_pages.py

Each page lists the module's public names (its ``__all__``) in that order, one mkdocstrings
entry each; ``tests/test_docs.py`` fails when a public name is missing from its page, so run
this after adding one. The pages' introductions are kept in ``INTRODUCTIONS`` below.
"""

import importlib
import inspect
import pathlib

DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs" / "api"

INTRODUCTIONS = {
    "kctx.ops": "Pure `keras.ops` math, no weights (runs on every Keras backend): the hams "
                "M(X) = DC, Kronecker attention, Poly-NL's statistics, efficient attention, "
                "latent graphs, the chord factors.",
    "kctx.layers": "Keras layers with weights, every one registered for serialization "
                   "(`package=\"kctx\"`) and checked by `kctx.testing.run_layer_test`; "
                   "`context_block` picks one by name.",
    "kctx.models": "Model builders: KANets and MobileNetV2, dilated ResNets with torchvision "
                   "weights, SegNeXt (MSCAN + LightHamHead) with the official checkpoints, "
                   "the FID Inception (2015-12-05 graph), context-block insertion, the "
                   "sequence models.",
    "kctx.metrics": "FID / IS / KID with the field's Inception network (the 2015-12-05 graph, "
                    "three resizes) or the digits classifier (FCD), from one pass: streaming "
                    "float64 statistics, reference statistics files, feature extractors.",
    "kctx.profile": "Parameters, multiply-adds counted from the traced graph, latency and peak "
                    "memory of a layer or model, in a fresh process; receptive fields.",
    "kctx.export": "SavedModel, ONNX and LiteRT artifacts (float, dynamic-range or full int8), "
                   "loaded back in their runtimes and checked; in process, the model as one "
                   "compiled program of its backend.",
    "kctx.training": "The runner every workflow uses: configs, run folders, step checkpoints "
                     "with exact resume, deterministic mode, the command lines, optimizers.",
    "kctx.data": "The embedded default data (scikit-learn's digits), TFDS readers and the "
                 "step-indexed, per-host input streams the workflows share.",
    "kctx.host_memory": "glibc's treatment of large host buffers on PyTorch: freed ones kept "
                        "for reuse instead of mapped afresh (page faults) for every tensor.",
    "kctx.distribute": "Where a run trains: tf.distribute strategies on TensorFlow, "
                       "`keras.distribution.DataParallel` (one or several hosts) on JAX, "
                       "one device on PyTorch.",
    "kctx.convert": "Checkpoint conversion into kctx's models through one strict porting "
                    "helper: the FID Inception from pytorch-fid's or torch-fidelity's file, "
                    "SegNeXt from mmsegmentation's or the original repository's, the dilated "
                    "ResNets from torchvision's.",
    "kctx.checkpoints": "PyTorch `.pth` files read as NumPy arrays without PyTorch and without "
                        "running pickled code (an allow-list of globals), in time and memory "
                        "bounded by the file and `max_bytes`.",
    "kctx.sf": "Non-parametric sparse factorization (Chord SF) against truncated SVD.",
    "kctx.testing": "The shared layer-test battery and test helpers.",
}


def entry(module_name, name):
    """The mkdocstrings entry of one public name: classes and functions by the path where they
    are defined (``kctx.layers.context_block`` is also a submodule's name), other values by
    their public path."""
    obj = getattr(importlib.import_module(module_name), name)
    if not (inspect.isclass(obj) or inspect.isfunction(obj)):
        return [f"::: {module_name}.{name}", ""]
    return [f"::: {obj.__module__}.{obj.__qualname__}", ""]


def page(module_name):
    module = importlib.import_module(module_name)
    lines = [f"# `{module_name}`", "", INTRODUCTIONS[module_name], ""]
    for name in module.__all__:
        lines += entry(module_name, name)
    return "\n".join(lines)


def main():
    for module_name in INTRODUCTIONS:
        path = DOCS / f"{module_name.split('.')[1]}.md"
        path.write_text(page(module_name))
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
