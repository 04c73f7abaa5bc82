"""Session set-up: quiet TensorFlow and two logical CPUs for MirroredStrategy."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from kctx.testing import configure_logical_cpus  # noqa: E402

# Must run before TensorFlow initialises its devices.
configure_logical_cpus(2)
