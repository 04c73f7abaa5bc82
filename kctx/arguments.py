"""argparse types shared by kctx's command lines (benchmarks, workflows, studies): a bad
value is refused at parse time, naming the flag and the value received."""

import argparse
import math
import os

__all__ = ["output_path", "positive_float", "positive_int"]


def positive_int(text):
    """argparse type: an integer ≥ 1 (sizes, batches, repeats), refused at parse time.

    Examples:
        >>> import argparse
        >>> parser = argparse.ArgumentParser(prog="bench")
        >>> _ = parser.add_argument("--size", type=positive_int)
        >>> parser.parse_args(["--size", "64"]).size
        64
        >>> positive_int("0")
        Traceback (most recent call last):
        ...
        argparse.ArgumentTypeError: must be a positive integer. Received: '0'
    """
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1 or str(value) != text.strip().lstrip("+"):
        raise argparse.ArgumentTypeError(f"must be a positive integer. Received: {text!r}")
    return value


def positive_float(text):
    """argparse type: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0. Received: {text!r}")
    return value


def output_path(text):
    """argparse type: a file path whose folder exists and is writable, checked before the
    benchmark runs (not after an hour of it)."""
    folder = os.path.dirname(os.path.abspath(text))
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"is a directory; pass a file path. Received: {text!r}")
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"its folder {folder} does not exist. Received: {text!r}")
    if not os.access(folder, os.W_OK):
        raise argparse.ArgumentTypeError(f"its folder {folder} is not writable. "
                                         f"Received: {text!r}")
    return text
