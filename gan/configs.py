"""Named GAN configurations (architecture + optimisation)."""

import dataclasses

from kctx.training import replace_config


@dataclasses.dataclass(frozen=True)
class GANConfig:
    """One experiment's settings.

    ``generator_channels`` are the output channels of G's up-blocks (4×4 → 8×8
    → … → resolution); ``discriminator_blocks`` are D's (channels, downsample)
    residual blocks. The context block sits after the G block that outputs
    ``g_context_resolution`` and after the D block that outputs
    ``d_context_resolution``. ``train_split`` / ``eval_split`` name the
    dataset splits trained on and compared against for FID.
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

    def __post_init__(self):
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
        g_context_resolution=32, d_context_resolution=32,
        batch_size=batch_size, g_learning_rate=1e-4, d_learning_rate=4e-4,
        beta_1=0.0, beta_2=0.9, d_steps=1, ema_decay=0.9999, ema_start=20_000, steps=1_000_000,
        sample_every=5000, checkpoint_every=5000, eval_split="validation",
    )


CONFIGS = {
    # The embedded default: scikit-learn digits at 32×32, small enough for 2 CPU cores.
    # D has no 32×32 feature map beyond the image itself, so its block sits at 16×16.
    "digits": GANConfig(
        name="digits", dataset="digits", resolution=32, image_channels=1, num_classes=10,
        latent_dim=64, base_channels=128, generator_channels=(128, 64, 32),
        discriminator_blocks=((32, True), (64, True), (64, False)),
        g_context_resolution=32, d_context_resolution=16,
        batch_size=64, g_learning_rate=2e-4, d_learning_rate=4e-4,
        # No EMA: a 10-minute run is too short for one (the average would still
        # hold early weights, and G's batch-norm statistics would not match it).
        beta_1=0.0, beta_2=0.9, ema_decay=None, steps=1500, sample_every=500,
        checkpoint_every=500, train_split="all", eval_split="all",
    ),
    # SNGAN/BigGAN-style CIFAR-10 (32×32).
    "cifar10": GANConfig(
        name="cifar10", dataset="cifar10", resolution=32, image_channels=3, num_classes=10,
        latent_dim=128, base_channels=256, generator_channels=(256, 256, 256),
        discriminator_blocks=((128, True), (128, True), (128, False), (128, False)),
        g_context_resolution=32, d_context_resolution=16,
        batch_size=64, g_learning_rate=1e-4, d_learning_rate=4e-4,
        beta_1=0.0, beta_2=0.9, ema_decay=0.9999, ema_start=20_000, steps=100_000,
        sample_every=2000,
        checkpoint_every=2000,
    ),
    # CelebA at 64×64 (central 178×178 square, antialiased resize), unconditional
    # (one class); the context block at 32×32 in both nets.
    "celeba64": GANConfig(
        name="celeba64", dataset="celeb_a", resolution=64, image_channels=3, num_classes=1,
        latent_dim=128, base_channels=512, generator_channels=(512, 256, 128, 64),
        discriminator_blocks=((64, True), (128, True), (256, True), (512, True), (512, False)),
        g_context_resolution=32, d_context_resolution=32,
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
