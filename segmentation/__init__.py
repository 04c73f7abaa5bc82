"""Semantic segmentation: HamNet-style dilated ResNets with a kctx context head, and SegNeXt;
mIoU.

``python -m segmentation.train`` trains on the embedded ``digits_seg`` data by
default (see :mod:`segmentation.data`); models are in :mod:`segmentation.models`.
``segmentation.evaluate`` re-scores a run, ``segmentation.export`` exports it,
``segmentation.convert`` turns an official SegNeXt checkpoint into a run folder and
``segmentation.predict`` writes masks of image files.
"""
