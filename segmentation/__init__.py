"""HamNet-style semantic segmentation: dilated ResNets with a kctx context head, mIoU.

``python -m segmentation.train`` trains on the embedded ``digits_seg`` data by
default (see :mod:`segmentation.data`); models are in :mod:`segmentation.models`.
"""
