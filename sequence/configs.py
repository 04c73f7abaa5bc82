"""Named sequence configurations: the task, the network and the paper's optimisation."""

import dataclasses

from kctx.training import (
    DTYPE_POLICIES,
    check_nonnegative,
    check_one_of,
    check_positive,
    replace_config,
)
from sequence.data import LRA_TASKS, TASKS

MODELS = ("psf", "transformer")
RESIDUALS = ("factor", "output", None)


@dataclasses.dataclass(frozen=True)
class SequenceConfig:
    """One experiment's settings (every field is a ``python -m sequence.train`` flag).

    Khalitov et al. (Sec. 5.2): Adam at lr 1e-3, batch 40, held-out accuracy
    on 5,000 sequences; the Long Range Arena tasks (Sec. 5.3) have fixed lengths.

    Attributes:
        name: the config's name.
        task: adding, temporal_order (synthetic) or listops, text, image, pathfinder (LRA).
        length: sequence length n (LRA tasks have their own).
        model: psf (the authors' PSF-Attn network) or transformer (their baseline).
        steps: training steps, at most (training ends earlier at target_accuracy).
        batch_size: global batch size.
        learning_rate: Adam's learning rate.
        eval_every: steps between held-out evaluations (and checkpoints).
        target_accuracy: training ends once the held-out accuracy reaches this (0: never).
        embed_dim: width of the input embedding.
        num_blocks: PSF-Attn blocks (or Transformer encoder layers).
        hidden_units: PSF-Attn: width of the factors' MLPs.
        value_units: PSF-Attn: channels of V.
        residual: PSF-Attn: add V after every factor (factor, the authors' code), once to
            the output (output), or not at all (none).
        num_heads: Transformer heads.
        pooling: flatten (all positions into the head) or cls (a prepended token's output).
        eval_examples: held-out sequences scored (LRA: the first N of the test split, 0 all).
        eval_batch_size: batch of the held-out evaluation.
    """

    name: str
    task: str
    length: int
    model: str = "psf"
    steps: int = 1500
    batch_size: int = 40
    learning_rate: float = 1e-3
    eval_every: int = 250
    target_accuracy: float = 0.99
    embed_dim: int = 32
    num_blocks: int = 1
    hidden_units: int = 32
    value_units: int = 8
    residual: str | None = "factor"
    num_heads: int = 1
    pooling: str = "flatten"
    eval_examples: int = 5000
    eval_batch_size: int = 100
    dtype_policy: str = "float32"

    def __post_init__(self):
        check_one_of(self, "dtype_policy", DTYPE_POLICIES)
        check_one_of(self, "task", TASKS + tuple(LRA_TASKS))
        check_one_of(self, "model", MODELS)
        check_one_of(self, "residual", RESIDUALS)
        check_one_of(self, "pooling", ("flatten", "cls"))
        check_positive(self, "length", "steps", "batch_size", "eval_every", "embed_dim",
                       "num_blocks", "hidden_units", "value_units", "num_heads",
                       "eval_batch_size")
        check_positive(self, "learning_rate", integer=False)
        check_nonnegative(self, "target_accuracy", integer=False)
        check_nonnegative(self, "eval_examples")
        if self.task in LRA_TASKS and self.length != LRA_TASKS[self.task][0]:
            raise ValueError(f"{self.name}: the LRA task {self.task!r} has length "
                             f"{LRA_TASKS[self.task][0]}. Received: length={self.length}")
        if self.task in TASKS and (self.length < 2 or self.eval_examples < 1):
            raise ValueError(f"{self.name}: synthetic tasks need length >= 2 and "
                             f"eval_examples >= 1. Received: length={self.length}, "
                             f"eval_examples={self.eval_examples}")


CONFIGS = {
    # The paper's synthetic tasks at length 1,024 (PSF-Attn reaches 99% on Adding in about
    # 1,000 steps, 3 minutes on 2 CPU cores).
    "adding": SequenceConfig(name="adding", task="adding", length=1024),
    "temporal_order": SequenceConfig(name="temporal_order", task="temporal_order", length=1024),
    # Long Range Arena (local lra_release/ or TFDS under --data-dir).
    **{task: SequenceConfig(name=task, task=task, length=LRA_TASKS[task][0], eval_examples=0)
       for task in LRA_TASKS},
}


def get_config(name, **overrides):
    """A named config with fields replaced (:func:`kctx.training.replace_config`)."""
    return replace_config(CONFIGS, name, "sequence", **overrides)
