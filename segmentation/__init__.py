"""HamNet-style segmentation workflow on keras-hub backbones; see the segmentation issue."""
