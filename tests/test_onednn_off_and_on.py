"""The tests marked ``tf_kernels`` again, with TensorFlow's oneDNN switched the other way.

TensorFlow turns its oneDNN kernels on by default only on CPUs with AVX-512-class features
(AVX512_VNNI, AVX512_BF16, AMX); elsewhere (AVX2-only CPUs such as AMD's Zen 3) its own
kernels run. The two differ in rounding, in what their memory statistics keep and in which
cases they accept (TensorFlow's own depthwise kernel refuses unequal strides, oneDNN's
convolution has mapped an empty batch to the input's shape). The tests whose outcome depends
on which kernels run carry ``@pytest.mark.tf_kernels``; this test runs them in a pytest
subprocess with ``TF_ENABLE_ONEDNN_OPTS`` set to the other value, so that any development
machine or CI checks both: an AVX-512 machine what an AVX2 machine runs, and the reverse.
"""

import os
import pathlib
import subprocess
import sys

import pytest

TESTS = pathlib.Path(__file__).parent
MARK = "pytest.mark.tf_kernels"


def onednn_is_on():
    """Whether this process's TensorFlow runs oneDNN's kernels (the environment variable
    where it is set, else TensorFlow's choice for this CPU)."""
    from tensorflow.python.util import _pywrap_util_port

    return bool(_pywrap_util_port.IsMklEnabled())


def marked_files():
    """The test files with a ``tf_kernels`` test (this one names the mark but has none)."""
    return sorted(str(path) for path in TESTS.glob("test_*.py")
                  if path.name != pathlib.Path(__file__).name and MARK in path.read_text())


def test_marked_files_are_found():
    names = {pathlib.Path(path).name for path in marked_files()}
    assert {"test_depthwise.py", "test_profile.py"} <= names


@pytest.mark.slow
def test_tensorflow_kernel_tests_pass_with_onednn_switched_the_other_way():
    other = "0" if onednn_is_on() else "1"
    env = {**os.environ, "TF_ENABLE_ONEDNN_OPTS": other, "KERAS_BACKEND": "tensorflow"}
    command = [sys.executable, "-m", "pytest", "-m", "tf_kernels", "-n", "0", "-q",
               "-p", "no:cacheprovider", "--durations=5", *marked_files()]
    result = subprocess.run(command, cwd=TESTS.parent, env=env, capture_output=True,
                            text=True, timeout=1200)
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"TF_ENABLE_ONEDNN_OPTS={other}:\n{output[-8000:]}"
    assert " passed" in output and " failed" not in output, output[-2000:]
