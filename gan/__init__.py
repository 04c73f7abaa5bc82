"""HamGAN workflow (SAGAN/BigGAN-style GANs with a kctx context block); see the GAN issue."""
