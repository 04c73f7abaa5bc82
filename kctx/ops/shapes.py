"""Shape helpers of the ops."""

import math


def positions(shape):
    """N, the number of positions of a (B, ..., C) tensor's shape: the product of its middle
    axes where they are static, else -1 for a reshape to infer. A reshape to (B, N, C) with
    N = -1 is ambiguous for an empty batch (PyTorch refuses it), so a known N is given.

    Examples:
        >>> positions((None, 8, 6, 32)), positions((0, 8, 6, 32)), positions((2, None, 6, 3))
        (48, 48, -1)
    """
    middle = tuple(shape)[1:-1]
    return math.prod(middle) if all(size is not None for size in middle) else -1
