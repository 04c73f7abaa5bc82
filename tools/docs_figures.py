"""Draw the figures of the docs' operator pages into ``docs/images/`` (matplotlib).

    python tools/docs_figures.py

- ``attention_cost.png``: multiply-adds of one block against the side of a square map with
  C = 64 channels, counted by ``kctx.profile.count_macs`` from each block's traced graph:
  self-attention, the NMF Hamburger (r = 8, K = 6), KAO_KV, KAO_QKV and Poly-NL. The counts are
  printed as a table too.
- ``chord_factors.png``: the non-zeros of one Chord factor at n = 16 and of the products of
  1, 2 and M of them (``kctx.ops.chord_dense``), M = ``chord_num_factors(16)``.

Deterministic (counts and patterns, no timings), a few seconds on a CPU.
"""

import os
import pathlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from kctx.layers import context_block  # noqa: E402
from kctx.ops import chord_dense, chord_num_factors, chord_width  # noqa: E402
from kctx.profile import count_macs  # noqa: E402

IMAGES = pathlib.Path(__file__).resolve().parents[1] / "docs" / "images"
CHANNELS = 64
SIDES = (8, 16, 32, 48, 64, 96)
BLOCKS = {
    "self-attention": dict(name="self_attention"),
    "Hamburger NMF (r = 8, K = 6)": dict(name="ham_nmf", rank=8, steps=6, seed=0),
    "KAO_KV": dict(name="kao_kv"),
    "KAO_QKV": dict(name="kao_qkv"),
    "Poly-NL": dict(name="poly_nl"),
}


def block_macs():
    """{label: [MACs at each side]} of one block at inference on a (1, s, s, C) map."""
    counts = {}
    for label, arguments in BLOCKS.items():
        arguments = dict(arguments)
        block = context_block(arguments.pop("name"), **arguments)
        block.build((None, None, None, CHANNELS))
        counts[label] = [count_macs(lambda x: block(x, training=False), (1, s, s, CHANNELS))
                         for s in SIDES]
    return counts


def attention_cost(path):
    counts = block_macs()
    print("| side | N | " + " | ".join(counts) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in counts) + " |")
    for index, side in enumerate(SIDES):
        print(f"| {side} | {side * side:,} | "
              + " | ".join(f"{values[index]:,}" for values in counts.values()) + " |")
    figure, axis = plt.subplots(figsize=(6.4, 4.2))
    for label, values in counts.items():
        axis.plot([s * s for s in SIDES], values, marker="o", label=label)
    axis.set(xscale="log", yscale="log", xlabel="positions N = H·W (C = 64)",
             ylabel="multiply-adds (traced graph)",
             title="Cost of one context block at inference")
    axis.grid(True, which="both", alpha=0.3)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def chord_factors(path, n=16):
    rng = np.random.default_rng(0)
    num_factors = chord_num_factors(n)
    values = rng.uniform(0.5, 1.0, (num_factors, n, chord_width(n))).astype("float32")
    factors = keras.ops.convert_to_numpy(chord_dense(keras.ops.convert_to_tensor(values)))
    products = [factors[0]]
    for factor in factors[1:]:
        products.append(products[-1] @ factor)
    panels = [(r"one factor $W^{(1)}$", factors[0]), (r"$W^{(1)} W^{(2)}$", products[1]),
              (rf"$W^{{(1)}} \cdots W^{{({num_factors})}}$ (M = {num_factors})", products[-1])]
    figure, axes = plt.subplots(1, 3, figsize=(9, 3.2))
    for axis, (title, matrix) in zip(axes, panels):
        axis.imshow(matrix != 0, cmap="Greys", vmin=0, vmax=1, interpolation="nearest")
        axis.set(title=f"{title}\n{int(np.count_nonzero(matrix))} of {n * n} non-zero",
                 xticks=[], yticks=[])
    figure.suptitle(f"Chord sparsity at n = {n}", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main():
    IMAGES.mkdir(parents=True, exist_ok=True)
    attention_cost(IMAGES / "attention_cost.png")
    chord_factors(IMAGES / "chord_factors.png")
    print(f"wrote {IMAGES / 'attention_cost.png'} and {IMAGES / 'chord_factors.png'}")


if __name__ == "__main__":
    main()
