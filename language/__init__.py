"""Character-level language modelling with causal token mixers (``python -m language.train``)."""
