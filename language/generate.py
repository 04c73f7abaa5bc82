"""``python -m language.generate --model-dir DIR [--prompt TEXT] [--length N] [--temperature T] [--seed S]``.

Continues ``--prompt`` by ``--length`` characters with a ``language.train`` run's model (its
saved model, or a checkpoint with ``--checkpoint``), one character at a time through the
token mixers' recurrent forms (the causal Hamburger's state does not grow with the text;
attention's key-value cache does), and prints the prompt and the continuation. Characters
are drawn from softmax(logits / T) with the seed ``--seed``; ``--temperature 0`` takes the
most likely one.
"""

import sys

import numpy as np

from kctx.arguments import positive_int
from kctx.training.cli import command_parser, user_errors_exit
from kctx.training.runner import load_run
from language.workflow import WORKFLOW


def generate(model_dir, prompt="def ", length=200, temperature=0.8, seed=0, checkpoint=None):
    """The text ``prompt`` continued by ``length`` characters (bytes decoded as UTF-8, an
    invalid byte as U+FFFD) with the run's model.

    Examples:
        >>> generate("runs/language-stdlib-causal_hamburger-512-seed0", "import ")  # doctest: +SKIP
        'import os\\nimport sys\\n...'
    """
    if not prompt:
        raise ValueError("`prompt` must hold at least one character. Received: prompt=''")
    _, model, _ = load_run(WORKFLOW, model_dir, checkpoint=checkpoint, log=lambda *_: None)
    tokens = np.frombuffer(prompt.encode("utf-8"), np.uint8).astype(np.int32)[None]
    generated = model.generate(tokens, length, temperature=temperature, seed=seed)
    data = np.asarray(generated)[0].astype(np.uint8).tobytes()
    return data.decode("utf-8", errors="replace")


def main(argv=None):
    parser = command_parser("python -m language.generate", __doc__)
    parser.add_argument("--model-dir", required=True, help="a language.train run folder")
    parser.add_argument("--prompt", default="def ", help="the text to continue")
    parser.add_argument("--length", type=positive_int, default=200,
                        help="characters to generate")
    parser.add_argument("--temperature", type=float, default=0.8,
                        help="of the sampling (0: the most likely character)")
    parser.add_argument("--seed", type=int, default=0, help="of the draws")
    parser.add_argument("--checkpoint", help="a checkpoint instead of the saved model")
    args = parser.parse_args(argv)
    if args.temperature < 0:
        parser.error(f"--temperature must be at least 0. Received: {args.temperature}")
    with user_errors_exit(parser, (ValueError,)):
        text = generate(args.model_dir, args.prompt, args.length, args.temperature,
                        args.seed, args.checkpoint)
    sys.stdout.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
