"""Images from a folder, batch by batch, for scoring a folder of samples."""

import pathlib

import numpy as np

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".webp")


def image_batches(folder, batch_size=50, suffixes=IMAGE_SUFFIXES):
    """The images of ``folder`` (sorted by name) as uint8 RGB batches (B, H, W, 3).

    Consecutive images of one size share a batch; a change of size starts a new one
    (the FID Inception's resize takes any size). Read with Pillow, whose
    decompression-bomb limit (``PIL.Image.MAX_IMAGE_PIXELS``) stays in force.

    Args:
        folder: the directory (not searched recursively).
        batch_size: images per batch at most.
        suffixes: the file names read (case-insensitive).

    Yields:
        uint8 arrays (B, H, W, 3), for ``update_state`` with ``value_range=(0, 255)``.

    Raises:
        ValueError: no such folder, no image in it, or a file Pillow cannot read (named).
        ImportError: Pillow is not installed (kctx's own dependencies leave it out; the
            ``gan`` and ``segmentation`` extras bring it).

    Example:
        >>> import tempfile
        >>> from PIL import Image
        >>> folder = tempfile.mkdtemp()
        >>> for i in range(3):
        ...     Image.new("RGB", (8, 6), (i, 0, 0)).save(f"{folder}/{i}.png")
        >>> print(*(batch.shape for batch in image_batches(folder, batch_size=2)))
        (2, 6, 8, 3) (1, 6, 8, 3)
    """
    try:
        from PIL import Image, UnidentifiedImageError
    except ImportError as error:
        raise ImportError("`image_batches` reads image files with Pillow, which is not "
                          "installed: `pip install pillow`.") from error

    folder = pathlib.Path(folder)
    if not folder.is_dir():
        raise ValueError(f"No folder of images at {str(folder)!r}.")
    files = sorted(path for path in folder.iterdir()
                   if path.is_file() and path.suffix.lower() in suffixes)
    if not files:
        raise ValueError(f"{str(folder)!r} holds no image ({', '.join(suffixes)}).")
    batch = []
    for path in files:
        try:
            with Image.open(path) as image:
                array = np.asarray(image.convert("RGB"), np.uint8)
        except (OSError, UnidentifiedImageError, Image.DecompressionBombError) as error:
            raise ValueError(f"Cannot read {str(path)!r} as an image: {error}") from None
        if batch and (len(batch) == batch_size or batch[0].shape != array.shape):
            yield np.stack(batch)
            batch = []
        batch.append(array)
    yield np.stack(batch)
