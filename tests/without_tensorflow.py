"""Run a Python script or module (``-m``) in a process where TensorFlow cannot be found, as
in an install of kctx without TensorFlow: ``python without_tensorflow.py SCRIPT ARGS...`` or
``python without_tensorflow.py -m MODULE ARGS...`` (tests/test_backends.py).

Every finder on ``sys.meta_path`` is wrapped so that it finds no ``tensorflow`` module: as
when it is not installed, ``import tensorflow`` raises ModuleNotFoundError,
``importlib.util.find_spec("tensorflow")`` returns None (how Keras, JAX and PyTorch look for
an optional TensorFlow) and ``"tensorflow"`` never enters ``sys.modules``. (Putting None in
``sys.modules`` would fail the import too, but Keras takes a key there for TensorFlow.)
The processes it starts inherit ``KCTX_TESTS_WITHOUT_TENSORFLOW=1``, for which
tests/conftest.py hides TensorFlow too: pytest-xdist's workers are such processes.
"""

import os
import runpy
import sys

ENVIRONMENT_VARIABLE = "KCTX_TESTS_WITHOUT_TENSORFLOW"


class _FinderWithoutTensorFlow:
    def __init__(self, finder):
        self.finder = finder

    def find_spec(self, name, path=None, target=None):
        if name == "tensorflow" or name.startswith("tensorflow."):
            return None
        find_spec = getattr(self.finder, "find_spec", None)
        return None if find_spec is None else find_spec(name, path, target)

    def __getattr__(self, name):
        return getattr(self.finder, name)


def hide_tensorflow():
    """Wrap every finder of ``sys.meta_path`` (once) so that none finds TensorFlow."""
    assert "tensorflow" not in sys.modules, "TensorFlow was imported before it was hidden"
    sys.meta_path[:] = [finder if isinstance(finder, _FinderWithoutTensorFlow)
                        else _FinderWithoutTensorFlow(finder) for finder in sys.meta_path]


if __name__ == "__main__":
    hide_tensorflow()
    os.environ[ENVIRONMENT_VARIABLE] = "1"
    if sys.argv[1] == "-m":
        sys.argv = sys.argv[2:]
        runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
    else:
        sys.argv = sys.argv[1:]
        runpy.run_path(sys.argv[0], run_name="__main__")
    assert "tensorflow" not in sys.modules
