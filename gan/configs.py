"""Named GAN configurations (architecture, optimisation, evaluation)."""

import dataclasses

from kctx.layers import check_context_block
from kctx.ops.fid_resize import FID_RESIZES
from kctx.training import (
    DTYPE_POLICIES,
    check_nonnegative,
    check_one_of,
    check_positive,
    replace_config,
)

EXTRACTORS = ("digits_classifier", "fid_inception_v3", "inception_v3")


@dataclasses.dataclass(frozen=True)
class GANConfig:
    """One experiment's settings (every field is a ``python -m gan.train`` flag).

    Attributes:
        name: the config's name.
        dataset: ``digits`` (embedded) or a TFDS name (cifar10, celeb_a, imagenet2012).
        resolution: image side in pixels.
        image_channels: 1 (grey) or 3 (RGB).
        num_classes: classes the GAN is conditioned on (1: unconditional).
        latent_dim: length of the noise vector z.
        base_channels: channels of G's 4×4 input map.
        generator_channels: output channels of G's up-blocks (4×4 → 8×8 → … → resolution).
        discriminator_blocks: D's residual blocks as (channels, downsample) pairs.
        g_context_resolution: the context block follows the G block with this output side.
        d_context_resolution: the context block follows the first D block with this output side.
        context: the context block in G and D: ham_nmf, self_attention or none (with the
            gan recipe of kctx.layers.context_block), or any other block name.
        batch_size: global batch size.
        g_learning_rate: Adam learning rate of G (TTUR).
        d_learning_rate: Adam learning rate of D (TTUR).
        beta_1: Adam β₁ of both optimizers.
        beta_2: Adam β₂ of both optimizers.
        d_steps: D steps per G step (on the same batch).
        ema_decay: decay of the EMA of G's weights (BigGAN); none keeps no EMA.
        ema_start: G step from which the EMA averages (before it, a copy of G).
        steps: training steps (one D and one G update each).
        sample_every: steps between sample-grid PNGs.
        checkpoint_every: steps between checkpoints.
        train_split: the split trained on.
        eval_split: the real images the FID / FCD compares with.
        eval_samples: generated images scored at the end (FID / IS / KID, or FCD / CS / KID
            on digits; 0 skips the score; 50,000 as in the papers for CIFAR-10 and ImageNet).
        eval_real: real images scored (none: max(eval_samples, 10000), at most the split).
        extractor: feature extractor of the scores: digits_classifier (FCD), fid_inception_v3
            (the 2015-12-05 Inception graph of published FIDs; needs fid_weights) or
            inception_v3 (Keras' ImageNet weights, not comparable with papers); none picks
            digits_classifier on digits, fid_inception_v3 otherwise.
        extractor_weights: weights of the inception_v3 / digits_classifier extractors, when
            not in the Keras / kctx cache.
        fid_weights: the FID Inception's weights, pytorch-fid's
            pt_inception-2015-12-05-6726825d.pth or torch-fidelity's
            weights-inception-2015-12-05-6726825d.pth (their release pages); its SHA-256 is
            recorded with the scores.
        fid_resize: the FID Inception's resize to 299×299: tensorflow (TF1 bilinear, as
            TTUR / TF-GAN / torch-fidelity and the papers), pytorch-fid or clean (clean-fid).
        fid_reference: reference statistics (.npz: mu, sigma, and features for KID) of the
            real images: read when the file exists (refused if another extractor or resize
            made it), else computed from eval_split and written there.
        sample_with_ema: sample and score with the EMA generator when the run keeps one.
    """

    name: str
    dataset: str
    resolution: int
    image_channels: int
    num_classes: int
    latent_dim: int
    base_channels: int
    generator_channels: tuple
    discriminator_blocks: tuple
    g_context_resolution: int
    d_context_resolution: int
    context: str
    batch_size: int
    g_learning_rate: float
    d_learning_rate: float
    beta_1: float = 0.0
    beta_2: float = 0.9
    d_steps: int = 1
    ema_decay: float | None = None
    ema_start: int = 0
    steps: int = 1000
    sample_every: int = 500
    checkpoint_every: int = 500
    train_split: str = "train"
    eval_split: str = "train"
    eval_samples: int = 10_000
    eval_real: int | None = None
    extractor: str | None = None
    extractor_weights: str | None = None
    fid_weights: str | None = None
    fid_resize: str = "tensorflow"
    fid_reference: str | None = None
    sample_with_ema: bool = True
    dtype_policy: str = "float32"

    def __post_init__(self):
        check_one_of(self, "dtype_policy", DTYPE_POLICIES)
        check_positive(self, "resolution", "image_channels", "num_classes", "latent_dim",
                       "base_channels", "batch_size", "d_steps", "steps", "sample_every",
                       "checkpoint_every")
        check_positive(self, "g_learning_rate", "d_learning_rate", integer=False)
        check_nonnegative(self, "eval_samples", "ema_start")
        check_context_block(self.context)
        if self.extractor is not None:
            check_one_of(self, "extractor", EXTRACTORS)
        check_one_of(self, "fid_resize", FID_RESIZES)
        if self.eval_real is not None:
            check_positive(self, "eval_real")
        if self.ema_decay is not None and not 0.0 <= self.ema_decay < 1.0:
            raise ValueError(f"{self.name}: `ema_decay` must be in [0, 1) or none. "
                             f"Received: ema_decay={self.ema_decay!r}")
        expected = self.resolution // 4
        if 2 ** len(self.generator_channels) != expected:
            raise ValueError(
                f"{self.name}: {len(self.generator_channels)} generator blocks do not reach "
                f"resolution {self.resolution} from 4×4"
            )


def _sagan_128(name, batch_size):
    # SAGAN ImageNet 128×128 (Zhang et al. 2019; gf_dim = df_dim = 64), as HamGAN
    # (Geng et al. 2021, Appendix E.4): the context block at 32×32 in both nets.
    ch = 64
    return GANConfig(
        name=name, dataset="imagenet2012", resolution=128, image_channels=3, num_classes=1000,
        latent_dim=128, base_channels=16 * ch,
        generator_channels=(16 * ch, 8 * ch, 4 * ch, 2 * ch, ch),
        discriminator_blocks=((ch, True), (2 * ch, True), (4 * ch, True), (8 * ch, True),
                              (16 * ch, True), (16 * ch, False)),
        g_context_resolution=32, d_context_resolution=32, context="ham_nmf",
        batch_size=batch_size, g_learning_rate=1e-4, d_learning_rate=4e-4,
        beta_1=0.0, beta_2=0.9, d_steps=1, ema_decay=0.9999, ema_start=20_000, steps=1_000_000,
        sample_every=5000, checkpoint_every=5000, eval_split="validation", eval_samples=50_000,
    )


CONFIGS = {
    # The embedded default: scikit-learn digits at 32×32, small enough for 2 CPU cores.
    # D has no 32×32 feature map beyond the image itself, so its block sits at 16×16.
    "digits": GANConfig(
        name="digits", dataset="digits", resolution=32, image_channels=1, num_classes=10,
        latent_dim=64, base_channels=128, generator_channels=(128, 64, 32),
        discriminator_blocks=((32, True), (64, True), (64, False)),
        g_context_resolution=32, d_context_resolution=16, context="ham_nmf",
        batch_size=64, g_learning_rate=2e-4, d_learning_rate=4e-4,
        # No EMA: a 10-minute run is too short for one (the average would still
        # hold early weights, and G's batch-norm statistics would not match it).
        beta_1=0.0, beta_2=0.9, ema_decay=None, steps=1500, sample_every=500,
        checkpoint_every=500, train_split="all", eval_split="all", eval_samples=2000,
    ),
    # SNGAN/BigGAN-style CIFAR-10 (32×32).
    "cifar10": GANConfig(
        name="cifar10", dataset="cifar10", resolution=32, image_channels=3, num_classes=10,
        latent_dim=128, base_channels=256, generator_channels=(256, 256, 256),
        discriminator_blocks=((128, True), (128, True), (128, False), (128, False)),
        g_context_resolution=32, d_context_resolution=16, context="ham_nmf",
        batch_size=64, g_learning_rate=1e-4, d_learning_rate=4e-4,
        beta_1=0.0, beta_2=0.9, ema_decay=0.9999, ema_start=20_000, steps=100_000,
        sample_every=2000,
        checkpoint_every=2000, eval_samples=50_000,
    ),
    # CelebA at 64×64 (central 178×178 square, antialiased resize), unconditional
    # (one class); the context block at 32×32 in both nets.
    "celeba64": GANConfig(
        name="celeba64", dataset="celeb_a", resolution=64, image_channels=3, num_classes=1,
        latent_dim=128, base_channels=512, generator_channels=(512, 256, 128, 64),
        discriminator_blocks=((64, True), (128, True), (256, True), (512, True), (512, False)),
        g_context_resolution=32, d_context_resolution=32, context="ham_nmf",
        batch_size=64, g_learning_rate=1e-4, d_learning_rate=4e-4,
        beta_1=0.0, beta_2=0.9, ema_decay=0.9999, ema_start=20_000, steps=100_000,
        sample_every=2000, checkpoint_every=2000,
    ),
    # HamGAN-baby: SAGAN architecture and training (batch 256, TTUR 1e-4 / 4e-4, Adam β₁ = 0).
    "imagenet128_hamgan_baby": _sagan_128("imagenet128_hamgan_baby", batch_size=256),
    # HamGAN-strong: the YLG setting (same SAGAN-family networks, batch 1024).
    "imagenet128_hamgan_strong": _sagan_128("imagenet128_hamgan_strong", batch_size=1024),
}


def get_config(name, **overrides):
    """A named config, optionally with fields replaced (e.g. ``batch_size=8``)."""
    return replace_config(CONFIGS, name, "GAN", **overrides)
