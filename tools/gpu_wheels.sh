#!/bin/bash
# The wheels a GPU lease carries (issue 39, item 4), downloaded here into .whl/ (ignored by
# git; name it in the device call's `carry`). The device machine (Python 3.12, no network)
# has JAX, PyTorch, NumPy, SciPy, Matplotlib, OpenCV, rich, h5py, ml-dtypes, PyYAML and
# Pillow, but neither Keras nor the official SegNeXt (mmsegmentation 1.2.2 refuses mmcv
# 2.2, hence mmcv-lite 2.1.0). Every wheel is pinned, without its dependencies; the names
# after the first four are what those four need and the device lacks: their wheels'
# Requires-Dist, and ftfy, which mmseg.utils imports without declaring it (the dry run of
# tools/gpu_batch1_lease.sh finds such gaps). Run from the repository's root:
#   bash tools/gpu_wheels.sh
# The lease scripts then start with
#   pip install --no-index --no-deps --target /tmp/site .whl/*.whl
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .whl && mkdir .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
    keras==3.15.1 mmsegmentation==1.2.2 mmengine==0.10.7 mmcv-lite==2.1.0 \
    namex==0.1.0 optree==0.20.0 addict==2.4.0 yapf==0.43.0 platformdirs==4.5.1 \
    termcolor==3.3.0 prettytable==3.18.0 wcwidth==0.9.4 ftfy==6.3.1
ls .whl
du -sh .whl
