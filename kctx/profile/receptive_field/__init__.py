"""Receptive fields of functional Keras models: theoretical and effective.

- :mod:`~kctx.profile.receptive_field.rules`: what each layer does to a receptive field
  (a window, a merge, a resize, padding, nothing, or a mix of all positions), filed by
  layer class; :func:`register_receptive_field_rule` and :func:`register_global_layer`
  teach it a class (a workflow registers its own layers where it defines them).
- :mod:`~kctx.profile.receptive_field.theoretical`: :func:`theoretical_receptive_field`
  walks the layer graph from the input to a layer's output and counts the input pixels
  that can reach one output position (the RF) and those between two neighbouring
  positions (the jump).
- :mod:`~kctx.profile.receptive_field.effective`: :func:`effective_receptive_field`
  measures the effective receptive field (Luo et al., NeurIPS 2016) from input gradients.
- :mod:`~kctx.profile.receptive_field.graph`: finding a layer in nested functional models.
"""

from kctx.profile.receptive_field.effective import (EffectiveReceptiveField,
                                                    effective_receptive_field)
from kctx.profile.receptive_field.rules import (Window, register_global_layer,
                                                register_receptive_field_rule)
from kctx.profile.receptive_field.theoretical import (ReceptiveField,
                                                      theoretical_receptive_field)

# Also importable from here, as before the split (outside __all__).
from kctx.profile.receptive_field.effective import ERF_FRACTIONS, feature_function  # noqa: F401
from kctx.profile.receptive_field.rules import GLOBAL, POINTWISE  # noqa: F401

__all__ = ["EffectiveReceptiveField", "ReceptiveField", "Window", "effective_receptive_field",
           "register_global_layer", "register_receptive_field_rule",
           "theoretical_receptive_field"]
