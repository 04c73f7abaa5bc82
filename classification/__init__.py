"""Image classification with kctx models: KANets and their baselines, trained with ``fit``.

``python -m classification.train`` trains on the embedded digits by default;
named configs carry the paper's ImageNet recipe and CIFAR-10 / Imagenette.
"""
