"""Session set-up: quiet TensorFlow and two logical CPUs for MirroredStrategy."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from kctx.testing import configure_logical_cpus  # noqa: E402

# Must run before TensorFlow initialises its devices.
configure_logical_cpus(2)

# Cached artefacts (e.g. the digits classifier of the FCD) go to a per-session
# directory, never to the user's home.
if "KCTX_CACHE_DIR" not in os.environ:
    import tempfile

    os.environ["KCTX_CACHE_DIR"] = tempfile.mkdtemp(prefix="kctx-test-cache-")
