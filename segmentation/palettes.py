"""Class names and colours of the segmentation datasets, in one place.

:func:`class_names` and :func:`palette` serve ``segmentation.predict``'s masks and
overlays and the prediction PNGs of ``segmentation.train`` / ``segmentation.evaluate``.
ADE20K's 150 classes and colours are mmsegmentation's ``ADE20KDataset.METAINFO``
(mmseg 1.2.2; its "bed " without the trailing space), Cityscapes' 19 train ids those of
``CityscapesDataset.METAINFO`` (the official cityscapesScripts colours), PASCAL VOC's
the VOC colour map (:func:`voc_palette`); ``digits_seg`` and the others use the VOC
colours too.
"""

import numpy as np

from segmentation.data import IGNORE_LABEL

ADE20K_CLASS_NAMES = (
    "wall", "building", "sky", "floor", "tree", "ceiling", "road", "bed", "windowpane",
    "grass", "cabinet", "sidewalk", "person", "earth", "door", "table", "mountain", "plant",
    "curtain", "chair", "car", "water", "painting", "sofa", "shelf", "house", "sea", "mirror",
    "rug", "field", "armchair", "seat", "fence", "desk", "rock", "wardrobe", "lamp", "bathtub",
    "railing", "cushion", "base", "box", "column", "signboard", "chest of drawers", "counter",
    "sand", "sink", "skyscraper", "fireplace", "refrigerator", "grandstand", "path", "stairs",
    "runway", "case", "pool table", "pillow", "screen door", "stairway", "river", "bridge",
    "bookcase", "blind", "coffee table", "toilet", "flower", "book", "hill", "bench",
    "countertop", "stove", "palm", "kitchen island", "computer", "swivel chair", "boat", "bar",
    "arcade machine", "hovel", "bus", "towel", "light", "truck", "tower", "chandelier",
    "awning", "streetlight", "booth", "television receiver", "airplane", "dirt track",
    "apparel", "pole", "land", "bannister", "escalator", "ottoman", "bottle", "buffet",
    "poster", "stage", "van", "ship", "fountain", "conveyer belt", "canopy", "washer",
    "plaything", "swimming pool", "stool", "barrel", "basket", "waterfall", "tent", "bag",
    "minibike", "cradle", "oven", "ball", "food", "step", "tank", "trade name", "microwave",
    "pot", "animal", "bicycle", "lake", "dishwasher", "screen", "blanket", "sculpture", "hood",
    "sconce", "vase", "traffic light", "tray", "ashcan", "fan", "pier", "crt screen", "plate",
    "monitor", "bulletin board", "shower", "radiator", "glass", "clock", "flag",
)
ADE20K_PALETTE = (
    (120, 120, 120), (180, 120, 120), (6, 230, 230), (80, 50, 50), (4, 200, 3), (120, 120, 80),
    (140, 140, 140), (204, 5, 255), (230, 230, 230), (4, 250, 7), (224, 5, 255), (235, 255, 7),
    (150, 5, 61), (120, 120, 70), (8, 255, 51), (255, 6, 82), (143, 255, 140), (204, 255, 4),
    (255, 51, 7), (204, 70, 3), (0, 102, 200), (61, 230, 250), (255, 6, 51), (11, 102, 255),
    (255, 7, 71), (255, 9, 224), (9, 7, 230), (220, 220, 220), (255, 9, 92), (112, 9, 255), (8,
    255, 214), (7, 255, 224), (255, 184, 6), (10, 255, 71), (255, 41, 10), (7, 255, 255), (224,
    255, 8), (102, 8, 255), (255, 61, 6), (255, 194, 7), (255, 122, 8), (0, 255, 20), (255, 8,
    41), (255, 5, 153), (6, 51, 255), (235, 12, 255), (160, 150, 20), (0, 163, 255), (140, 140,
    140), (250, 10, 15), (20, 255, 0), (31, 255, 0), (255, 31, 0), (255, 224, 0), (153, 255,
    0), (0, 0, 255), (255, 71, 0), (0, 235, 255), (0, 173, 255), (31, 0, 255), (11, 200, 200),
    (255, 82, 0), (0, 255, 245), (0, 61, 255), (0, 255, 112), (0, 255, 133), (255, 0, 0), (255,
    163, 0), (255, 102, 0), (194, 255, 0), (0, 143, 255), (51, 255, 0), (0, 82, 255), (0, 255,
    41), (0, 255, 173), (10, 0, 255), (173, 255, 0), (0, 255, 153), (255, 92, 0), (255, 0,
    255), (255, 0, 245), (255, 0, 102), (255, 173, 0), (255, 0, 20), (255, 184, 184), (0, 31,
    255), (0, 255, 61), (0, 71, 255), (255, 0, 204), (0, 255, 194), (0, 255, 82), (0, 10, 255),
    (0, 112, 255), (51, 0, 255), (0, 194, 255), (0, 122, 255), (0, 255, 163), (255, 153, 0),
    (0, 255, 10), (255, 112, 0), (143, 255, 0), (82, 0, 255), (163, 255, 0), (255, 235, 0), (8,
    184, 170), (133, 0, 255), (0, 255, 92), (184, 0, 255), (255, 0, 31), (0, 184, 255), (0,
    214, 255), (255, 0, 112), (92, 255, 0), (0, 224, 255), (112, 224, 255), (70, 184, 160),
    (163, 0, 255), (153, 0, 255), (71, 255, 0), (255, 0, 163), (255, 204, 0), (255, 0, 143),
    (0, 255, 235), (133, 255, 0), (255, 0, 235), (245, 0, 255), (255, 0, 122), (255, 245, 0),
    (10, 190, 212), (214, 255, 0), (0, 204, 255), (20, 0, 255), (255, 255, 0), (0, 153, 255),
    (0, 41, 255), (0, 255, 204), (41, 0, 255), (41, 255, 0), (173, 0, 255), (0, 245, 255), (71,
    0, 255), (122, 0, 255), (0, 255, 184), (0, 92, 255), (184, 255, 0), (0, 133, 255), (255,
    214, 0), (25, 194, 194), (102, 255, 0), (92, 0, 255),
)
CITYSCAPES_CLASS_NAMES = (
    "road", "sidewalk", "building", "wall", "fence", "pole", "traffic light", "traffic sign",
    "vegetation", "terrain", "sky", "person", "rider", "car", "truck", "bus", "train",
    "motorcycle", "bicycle",
)
CITYSCAPES_PALETTE = (
    (128, 64, 128), (244, 35, 232), (70, 70, 70), (102, 102, 156), (190, 153, 153), (153, 153,
    153), (250, 170, 30), (220, 220, 0), (107, 142, 35), (152, 251, 152), (70, 130, 180), (220,
    20, 60), (255, 0, 0), (0, 0, 142), (0, 0, 70), (0, 60, 100), (0, 80, 100), (0, 0, 230),
    (119, 11, 32),
)

VOC_CLASS_NAMES = (
    "background", "aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat",
    "chair", "cow", "diningtable", "dog", "horse", "motorbike", "person", "pottedplant",
    "sheep", "sofa", "train", "tvmonitor",
)
DIGITS_SEG_CLASS_NAMES = ("background",) + tuple(f"digit {d}" for d in range(10))
PETS_CLASS_NAMES = ("background", "pet")

CLASS_NAMES = {"ade20k": ADE20K_CLASS_NAMES, "cityscapes": CITYSCAPES_CLASS_NAMES,
               "voc": VOC_CLASS_NAMES, "digits_seg": DIGITS_SEG_CLASS_NAMES,
               "digits_seg_large": DIGITS_SEG_CLASS_NAMES,
               "oxford_iiit_pet": PETS_CLASS_NAMES}
PALETTES = {"ade20k": ADE20K_PALETTE, "cityscapes": CITYSCAPES_PALETTE}


def voc_palette(num_classes=256):
    """PASCAL VOC's colour map (class c's bits spread over R, G, B); 255 is white here.

    Args:
        num_classes: rows of the palette.

    Returns:
        uint8 (num_classes, 3).
    """
    palette = np.zeros((num_classes, 3), np.uint8)
    for index in range(num_classes):
        c, r, g, b = index, 0, 0, 0
        for bit in range(8):
            r |= ((c >> 0) & 1) << (7 - bit)
            g |= ((c >> 1) & 1) << (7 - bit)
            b |= ((c >> 2) & 1) << (7 - bit)
            c >>= 3
        palette[index] = (r, g, b)
    if num_classes > IGNORE_LABEL:
        palette[IGNORE_LABEL] = (255, 255, 255)
    return palette


def palette(dataset):
    """The colours of ``dataset``'s classes as a 256-row uint8 palette (label → RGB).

    Rows of the dataset's classes hold its official colours (ADE20K, Cityscapes) or
    VOC's (the others); the other rows VOC's, and the ignore label 255 white.

    Args:
        dataset: a :data:`segmentation.data.DATASETS` name.

    Returns:
        uint8 (256, 3).

    Example:

    >>> palette("cityscapes")[0].tolist(), palette("voc")[1].tolist()
    ([128, 64, 128], [128, 0, 0])
    """
    colours = voc_palette()
    own = PALETTES.get(dataset)
    if own is not None:
        colours[:len(own)] = own
    return colours


def class_names(dataset, num_classes):
    """The names of ``dataset``'s ``num_classes`` classes ("class k" where it has none).

    Args:
        dataset: a :data:`segmentation.data.DATASETS` name.
        num_classes: how many names.

    Returns:
        A tuple of ``num_classes`` strings.

    Example:

    >>> class_names("ade20k", 150)[:3], class_names("scene_parse150", 2)
    (('wall', 'building', 'sky'), ('class 0', 'class 1'))
    """
    names = CLASS_NAMES.get(dataset, ())
    return tuple(names[k] if k < len(names) else f"class {k}" for k in range(num_classes))
