"""Long-sequence workflow: PSF-Attn vs a Transformer on the synthetic tasks of Khalitov et
al. (Sec. 5.2) and the Long Range Arena (Sec. 5.3). Builds on ``kctx`` only."""
