"""kctx.ops and kctx.layers under the JAX backend (Keras picks its backend at import)."""

import os
import pathlib
import subprocess
import sys


def test_ops_and_layers_run_under_jax():
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu")
    env["PYTHONPATH"] = os.pathsep.join(
        [str(pathlib.Path(__file__).parent), env.get("PYTHONPATH", "")]
    )
    completed = subprocess.run(
        [sys.executable, str(pathlib.Path(__file__).parent / "jax_backend_check.py")],
        capture_output=True, text=True, env=env, timeout=600,
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    assert "JAX_BACKEND_OK" in completed.stdout
