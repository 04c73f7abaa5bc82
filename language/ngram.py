"""``python -m language.ngram [--config stdlib] [--orders 1-6] [--eval-characters N] [--output FILE]``.

Byte n-gram references for the language task: what the characters just before a position
tell about it, with no learning beyond counting. An n-gram model of order n predicts each
held-out byte from the n − 1 bytes before it, with counts from the training split and
Witten-Bell interpolation (:class:`WittenBell`), and is scored as ``language.train`` scores
its decoder: bits per character on the same held-out windows of the config's T (each byte
predicted from the bytes before it in its window), the first ``eval_characters``. A decoder
that scores above the order-2 (bigram) model's bits has learnt less from its context than
the previous byte alone tells. Prints a table; ``--output`` writes it as JSON.
"""

import collections
import json
import math
import sys
import time

import numpy as np

from kctx.arguments import output_path
from kctx.training.cli import command_parser, user_errors_exit
from kctx.validation import check_positive_int
from language.configs import CONFIGS, get_config
from language.data import VOCABULARY_SIZE, held_out_windows, read_corpus, split_corpus


class WittenBell:
    """A byte n-gram model with Witten-Bell interpolation (Witten & Bell, 1991; the form of
    Chen & Goodman, 1998, Eq. 11). With h the k bytes before a position and h' its last k − 1,

        P_k(c | h) = (C(h c) + N₁₊(h •) · P_{k−1}(c | h')) / (C(h) + N₁₊(h •)),

    C counting in the training text, C(h) = Σ_c C(h c) and N₁₊(h •) the distinct bytes seen
    after h; P₋₁ is uniform over the 256 bytes, and a context h never seen takes
    P_{k−1}(c | h') whole. Each P_k sums to 1 over the bytes.

    Args:
        text: the training text (bytes).
        order: n ≥ 1: the model sees the n − 1 bytes before a position (1: the unigram).

    Example:
        >>> model = WittenBell(b"abab", order=2)
        >>> round(sum(model.probability(b"a", bytes([c])) for c in range(256)), 12)
        1.0
        >>> model.probability(b"a", b"b") > model.probability(b"", b"b")
        True

    Reference:
        Witten & Bell, "The zero-frequency problem", IEEE Trans. Inf. Theory, 1991; Chen &
        Goodman, "An empirical study of smoothing techniques for language modeling", 1998.
    """

    def __init__(self, text, order):
        check_positive_int("order", order)
        self.order = order
        self.counts, self.totals, self.types = [], [], []
        for k in range(order):  # grams of k bytes of context and the byte after them
            grams = collections.Counter(text[i - k:i + 1] for i in range(k, len(text)))
            totals, types = collections.Counter(), collections.Counter()
            for gram, count in grams.items():
                totals[gram[:-1]] += count
                types[gram[:-1]] += 1
            self.counts.append(grams)
            self.totals.append(totals)
            self.types.append(types)

    def probability(self, context, byte):
        """P(``byte`` | the last n − 1 bytes of ``context``), both bytes."""
        probability = 1.0 / VOCABULARY_SIZE
        for k in range(min(self.order - 1, len(context)) + 1):
            history = context[len(context) - k:]
            total = self.totals[k].get(history, 0)
            if not total:
                break
            seen = self.types[k][history]
            probability = (self.counts[k].get(history + byte, 0) + seen * probability) / (
                total + seen)
        return probability


def bits_per_character(model, text, length, max_characters=0):
    """``model``'s bits per character on the held-out windows the decoder is scored on
    (:func:`language.data.held_out_windows` of ``text``, an uint8 array): each target
    predicted from at most n − 1 bytes before it in its window."""
    inputs, targets = held_out_windows(text, length, max_characters)
    context_bytes, total = model.order - 1, 0.0
    for window_inputs, window_targets in zip(inputs, targets):
        window = window_inputs.astype(np.uint8).tobytes()
        for position, target in enumerate(window_targets.astype(np.uint8).tobytes()):
            context = window[max(0, position + 1 - context_bytes):position + 1]
            total -= math.log2(model.probability(context, bytes([target])))
    return total / targets.size


MAX_ORDER = 12  # 11 bytes of context: beyond it nearly every held-out context is unseen


def parse_orders(text):
    """``"1-6"`` or ``"1,2,4"`` → the orders (1 to :data:`MAX_ORDER`), sorted."""
    try:
        orders = set()
        for part in str(text).split(","):
            low, _, high = part.strip().partition("-")
            orders.update(range(int(low), int(high or low) + 1))
    except ValueError:
        orders = set()
    if not orders or min(orders) < 1 or max(orders) > MAX_ORDER:
        raise ValueError(f"`--orders` must be n from 1 to {MAX_ORDER} as a range or a list, "
                         f"e.g. 1-6 or 1,2,4. Received: {text!r}")
    return sorted(orders)


def references(config="stdlib", orders=range(1, 7), eval_characters=None, log=print):
    """The n-gram models' scores on ``config``'s held-out windows (its T and, unless given,
    its ``eval_characters``): a dict with the corpus digest and a row per order."""
    settings = get_config(config)
    eval_characters = settings.eval_characters if eval_characters is None else eval_characters
    texts, digest = read_corpus()
    train, held_out = split_corpus(texts)
    _, targets = held_out_windows(held_out, settings.context_length, eval_characters)
    result = {"config": config, "context_length": settings.context_length,
              "eval_characters": int(targets.size), "corpus_sha256": digest, "orders": []}
    training_text = train.tobytes()
    for order in orders:
        began = time.perf_counter()
        model = WittenBell(training_text, order)
        score = bits_per_character(model, held_out, settings.context_length, eval_characters)
        row = {"order": order, "context_bytes": order - 1, "bits_per_character": score,
               "seconds": round(time.perf_counter() - began, 1)}
        result["orders"].append(row)
        log(f"order {order} ({order - 1} bytes of context): {score:.4f} bits per character")
    return result


def main(argv=None):
    parser = command_parser("python -m language.ngram", __doc__)
    parser.add_argument("--config", default="stdlib", choices=sorted(CONFIGS),
                        help="whose T and held-out characters (default stdlib)")
    parser.add_argument("--orders", default="1-6", help="n of the models (default 1-6)")
    parser.add_argument("--eval-characters", type=int,
                        help="held-out characters scored (default: the config's; 0: all)")
    parser.add_argument("--output", type=output_path, help="write the table as JSON")
    args = parser.parse_args(argv)
    with user_errors_exit(parser, (ValueError,)):
        orders = parse_orders(args.orders)
        if args.eval_characters is not None and args.eval_characters < 0:
            raise ValueError("`--eval-characters` must be at least 0. Received: "
                             f"{args.eval_characters}")
        result = references(args.config, orders, args.eval_characters,
                            log=lambda *_: None)
    print(f"Byte n-grams (Witten-Bell) on {result['eval_characters']:,} held-out characters "
          f"of {result['config']} (T = {result['context_length']:,}):")
    print(f"{'n':>3} {'context':>8} {'bits/char':>10}")
    for row in result["orders"]:
        print(f"{row['order']:>3} {row['context_bytes']:>8} {row['bits_per_character']:>10.4f}")
    if args.output:
        with open(args.output, "w") as handle:
            json.dump(result, handle, indent=2)
        print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
