"""What the tool scripts share to run the official mmsegmentation code on CPU.

mmsegmentation 1.2.2 imports mmcv's compiled operators (``mmcv._ext``) at import time,
and ``mmcv-lite`` ships none. :func:`install_mmcv_ext_stub` puts a stand-in module in
``sys.modules`` first: its attributes are functions that raise, dunder names raise
AttributeError, so mmseg imports and nothing SegNeXt runs calls into it. Import this
module from a tool script (they run with the tools' virtual environment, see
tools/segnext_fixtures.py) before importing mmseg.
"""

import sys
import types


def install_mmcv_ext_stub():
    """Register the stand-in ``mmcv._ext`` (once)."""
    if "mmcv._ext" in sys.modules:
        return
    ext = types.ModuleType("mmcv._ext")

    def missing(name):
        if name.startswith("__"):
            raise AttributeError(name)

        def unavailable(*args, **kwargs):
            raise RuntimeError(f"mmcv._ext.{name} is not available (mmcv-lite)")

        return unavailable

    ext.__getattr__ = missing
    sys.modules["mmcv._ext"] = ext
