"""Test utilities shared by kctx, gan and segmentation tests (and user layers)."""

from kctx.testing.layer_test import configure_logical_cpus, mirrored_strategy, run_layer_test

__all__ = ["configure_logical_cpus", "mirrored_strategy", "run_layer_test"]
