"""Generation speed and memory against the generated length: the causal Hamburger's
recurrent state against attention's key-value cache (and linear attention, a causal
convolution), in :class:`kctx.models.CausalLanguageModel`.

Each mixer's model (the same width, blocks and vocabulary, random weights: speed and memory
do not depend on them) generates one sequence token by token (``model.step``, eager, batch
``--batch``) up to the longest length. At each length of ``--lengths`` the table gives the
time per token over the ``--window`` tokens that end there and the size of the state the
decoding loop carries (every block's mixer state: the key-value cache grows with t, the
causal Hamburger's K·(d·r + r²) and linear attention's sums do not). ``--ham-block-size L``
runs the Hamburger in its blocked form (a dictionary per block of L positions; its state
adds the block's K dictionaries), ``--ham-method vq`` its causal soft VQ (a state of
K·(d·r + r)).

Eager, Python's dispatch of each op dominates a token's time at these sizes; ``--compiled``
runs each token's step as one compiled program. On TensorFlow it is one ``tf.function``
traced with ``reduce_retracing``, so that the key-value cache's growing length is one
symbolic dimension, not a new trace per token. On JAX it is ``jax.jit`` of the step and the
greedy choice, with attention's key-value cache allocated once for the longest length
(``initial_state(batch, capacity=...)``: one program for every position, as JAX decoders
run) and the states donated to it (updated in place): there attention's time per token and
its state are those of the full cache at every length. The table then shows the mixers' own
costs.
"""

import time

import numpy as np

from kctx.arguments import output_path, positive_int
from kctx.bench import report

DEFAULT_MIXERS = ("causal_hamburger", "attention", "linear_attention", "causal_conv")


def state_bytes(states):
    """Bytes of every tensor in a model's decoding state."""
    from keras import ops

    total = 0
    for block in states:
        for tensor in block:
            total += int(np.prod(ops.shape(tensor))) * 4
    return total


def _compiled_decoding(model, batch, capacity):
    """The compiled form of ``(tokens, states) -> (next tokens or logits, states)`` on this
    backend and the states it starts from (see the module's docstring)."""
    import keras

    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return "tf.function", tf.function(model.step, reduce_retracing=True), \
            model.initial_state(batch)
    if backend == "jax":
        import jax

        def decode(tokens, states):
            logits, states = model.step(tokens, states)
            return keras.ops.cast(keras.ops.argmax(logits, axis=-1), "int32"), states

        # The states donated: XLA writes each position into the cache in place, as JAX
        # decoders do (without donation every token copies the whole cache: a 64 MB one
        # took 95 ms a step here instead of 0.007), each state tensor its own buffer (the
        # initial states may share one zeros array, which cannot be donated twice).
        states = jax.tree_util.tree_map(lambda x: jax.numpy.array(x, copy=True),
                                        model.initial_state(batch, capacity=capacity))
        return "jax.jit", jax.jit(decode, donate_argnums=1), states
    raise ValueError("`compiled=True` needs the TensorFlow or the JAX backend (a compiled "
                     "step per token); PyTorch runs eagerly. Received: "
                     f"backend={backend!r}")


def run_generation(mixers=DEFAULT_MIXERS, lengths=(1024, 2048, 4096, 8192, 16384), batch=1,
                   embed_dim=128, num_blocks=4, window=64, seed=0, compiled=False,
                   ham_block_size=None, ham_method="nmf", log=print):
    """Time token-by-token generation per mixer; ``compiled``: each token's step as one
    compiled program (``tf.function`` on TensorFlow, ``jax.jit`` on JAX), else eager;
    ``ham_block_size`` and ``ham_method``: the causal Hamburger's ``block_size`` and
    ``method``. Returns the table's rows."""
    import keras

    from kctx.models import CausalLanguageModel

    lengths = sorted(lengths)
    if window >= lengths[0]:
        raise ValueError(f"`window` must be below the shortest length ({lengths[0]}): the "
                         f"timed tokens end at each length. Received: window={window}")
    rows = []
    for mixer in mixers:
        keras.utils.set_random_seed(seed)
        options = {}
        if mixer == "causal_hamburger":  # (only what differs from the layer's defaults)
            options.update({"block_size": ham_block_size} if ham_block_size else {},
                           **({"method": ham_method} if ham_method != "nmf" else {}))
        model = CausalLanguageModel(vocabulary_size=256, embed_dim=embed_dim,
                                    num_blocks=num_blocks, mixer=mixer, mixer_options=options)
        model.build((batch, 1))
        form, step, states = (_compiled_decoding(model, batch, lengths[-1]) if compiled
                              else (False, model.step, model.initial_state(batch)))
        tokens = keras.ops.zeros((batch,), "int32")
        log(f"generating {lengths[-1]} tokens with {mixer} ...")
        marks = {}
        for position in range(1, lengths[-1] + 1):
            if any(position == length - window + 1 for length in lengths):
                start = time.perf_counter()
            outputs, states = step(tokens, states)
            tokens = (outputs if form == "jax.jit"  # the greedy choice made in the program
                      else keras.ops.cast(keras.ops.argmax(outputs, axis=-1), "int32"))
            if position in lengths:
                keras.ops.convert_to_numpy(tokens)  # the last token computed
                marks[position] = (time.perf_counter() - start) / window
                rows.append({"mixer": mixer, "options": options, "length": position,
                             "batch": batch,
                             "compiled": form,
                             "params": model.count_params(),
                             "ms_per_token": 1e3 * marks[position],
                             "tokens_per_second": batch / marks[position],
                             "state_mb": state_bytes(states) / 2**20})
    return rows


def format_table(rows):
    compiled = bool(rows) and rows[0]["compiled"]
    header = (f"{'Mixer':<18} {'Length':>7} {'Params':>10} {'ms / token':>11} "
              f"{'tokens / s':>11} {'State MB':>9}")
    lines = [header, "-" * len(header)]
    for r in rows:
        name = r["mixer"] + "".join(f" {key}={value}"
                                    for key, value in r.get("options", {}).items())
        lines.append(f"{name:<18} {r['length']:>7} {r['params']:>10,} "
                     f"{r['ms_per_token']:>11.2f} {r['tokens_per_second']:>11.1f} "
                     f"{r['state_mb']:>9.3f}")
    lines.append("")
    lines.append((f"Compiled ({compiled}, one program for every token)" if compiled
                  else "Eager")
                 + " token-by-token decoding (model.step), the time per token averaged over "
                 "the window ending at each length; state: the mixers' decoding state, float32.")
    return "\n".join(lines)


def main(args):
    rows = run_generation(mixers=args.mixers, lengths=args.lengths, batch=args.batch,
                          embed_dim=args.embed_dim, num_blocks=args.num_blocks,
                          window=args.window, compiled=args.compiled,
                          ham_block_size=args.ham_block_size, ham_method=args.ham_method)
    return report(rows, format_table(rows), args.json)


def add_arguments(parser):
    parser.add_argument("--mixers", nargs="+", default=list(DEFAULT_MIXERS),
                        choices=list(DEFAULT_MIXERS))
    parser.add_argument("--lengths", type=positive_int, nargs="+",
                        default=[1024, 2048, 4096, 8192, 16384])
    parser.add_argument("--batch", type=positive_int, default=1)
    parser.add_argument("--embed-dim", type=positive_int, default=128)
    parser.add_argument("--num-blocks", type=positive_int, default=4)
    parser.add_argument("--window", type=positive_int, default=64,
                        help="tokens timed before each length")
    parser.add_argument("--compiled", action="store_true",
                        help="each token's step as one compiled program: tf.function on "
                             "TensorFlow, jax.jit on JAX (attention's cache allocated once "
                             "for the longest length)")
    parser.add_argument("--ham-block-size", type=positive_int,
                        help="the causal Hamburger's block_size (its blocked form)")
    parser.add_argument("--ham-method", choices=["nmf", "vq"], default="nmf",
                        help="the causal Hamburger's decomposition (default nmf)")
    parser.add_argument("--json", type=output_path,
                        help="write the rows as a JSON list to this path")
