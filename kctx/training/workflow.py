"""What a workflow supplies to the runner (:class:`Workflow`), and what it is given (:class:`Run`).

A workflow (``gan``, ``classification``, ``segmentation``, ``sequence``)
subclasses :class:`Workflow` with what is its own: its configs (a frozen
dataclass and named presets), how to build the compiled model, its
step-indexed training stream, its held-out data and its evaluation.
:func:`kctx.training.run` does the rest the same way for all of them.
"""

import dataclasses
import pathlib
from typing import Any, Callable

import keras

from kctx.distribute import as_distribution
from kctx.training.config import replace_config


@dataclasses.dataclass(frozen=True)
class Schedule:
    """How long a run trains and how often it checkpoints and evaluates, in steps.

    ``eval_every`` 0 evaluates only at the end.
    """

    steps: int
    checkpoint_every: int
    eval_every: int = 0


@dataclasses.dataclass(frozen=True)
class DataLocation:
    """Where datasets are: a TFDS / local data directory, TFDS's manual directory,
    and whether a missing TFDS dataset may be downloaded (see :func:`kctx.data.tfds_dataset`)."""

    data_dir: str | None = None
    manual_dir: str | None = None
    download: bool = False


@dataclasses.dataclass
class Run:
    """One run, as the workflow's functions see it.

    Attributes:
        workflow: the :class:`Workflow`.
        config: the resolved config (a frozen dataclass).
        seed: the run's seed; batch k of the training stream is a function of (seed, k).
        directory: the run folder.
        distribution: where it trains, a :class:`kctx.distribute.Distribution` (a
            ``tf.distribute`` strategy or a ``keras.distribution.Distribution`` is
            wrapped in one).
        data: the :class:`DataLocation`.
        deterministic: whether the run is bit-reproducible (single-threaded TensorFlow
            with op determinism; single-threaded XLA on JAX; single-threaded deterministic
            algorithms on PyTorch).
        verbose: Keras progress-bar verbosity.
        log: called with one line per message.
    """

    workflow: Any
    config: Any
    seed: int
    directory: pathlib.Path
    distribution: Any
    data: DataLocation = DataLocation()
    deterministic: bool = False
    verbose: int = 1
    log: Callable = print

    def __post_init__(self):
        self.distribution = as_distribution(self.distribution)

    @property
    def strategy(self):
        """The ``tf.distribute`` strategy (None on the JAX and PyTorch backends)."""
        return self.distribution.strategy

    @property
    def replicas(self):
        return self.distribution.replicas

    @property
    def chief(self):
        return self.distribution.chief

    @property
    def worker(self):
        """``(index, count)`` of this worker (``(0, 1)`` in a single process)."""
        return self.distribution.worker

    def sum_over_workers(self, value):
        """A NumPy array summed over the workers (the value itself in one process)."""
        return self.distribution.sum_over_workers(value)

    def dataset(self, dataset_fn):
        """``dataset_fn(input_context)`` for ``fit`` / ``evaluate``
        (:meth:`kctx.distribute.Distribution.dataset`): on TensorFlow under several
        replicas, per-replica batches from each input pipeline (one per host) through
        ``strategy.distribute_datasets_from_function``; on JAX, global batches, or each
        host's part of them; on one device ``dataset_fn(None)``, global batches."""
        return self.distribution.dataset(dataset_fn)

    def keras_evaluate(self, model, dataset_fn):
        """``model.evaluate`` (a dict of scores) on :meth:`dataset` of ``dataset_fn``:
        with several hosts each input pipeline scores its shard."""
        dataset = self.dataset(dataset_fn)
        with self.distribution.fitting(model, dataset):
            return model.evaluate(dataset, verbose=0, return_dict=True)


class Workflow:
    """What a workflow supplies to :func:`kctx.training.run`: subclass it and override what
    is its own.

    A subclass sets the class attributes and implements :meth:`variant`,
    :meth:`build`, :meth:`train_data` and :meth:`evaluate`; the other methods
    have defaults. The runner and the CLIs (:mod:`kctx.training.cli`) do the
    rest the same way for every workflow.

    Attributes:
        name: the workflow's name (``"gan"``): its package, and the run folder's prefix.
        configs: named configs (presets), instances of one frozen dataclass
            whose fields are the command-line flags (its docstring's
            ``Attributes:`` section is their help).
        default_config: the name used when none is given.
        model_file: the file the inference model is saved to.
        evaluation_fields: config fields that only change the evaluation, so
            ``evaluate`` may override them and a resumed run may differ in them.
        variant_field: the config field :func:`kctx.training.run` takes as its third
            positional argument (``"context"``, ``"model"``; ``run(workflow, config,
            variant)``).
        description: the CLI's help text.
        export_evaluation: ``None`` when an exported model is only compared with
            Keras; otherwise the evaluation fields replaced when ``export`` scores
            the artifact with :meth:`evaluate` (``{}``: the run's own).

    Examples:
        >>> class Tiny(Workflow):
        ...     name, configs, default_config = "tiny", {"one": ...}, "one"
        ...     def variant(self, config): ...
        ...     def build(self, run): ...           # compiled model, built in the strategy scope
        ...     def train_data(self, run, start_step, input_context): ...
        ...     def evaluate(self, run, model): ...  # dict of scores
        >>> # then kctx.training.run(Tiny(), "one"); kctx.training.train_main(Tiny(), argv)
    """

    name = None
    configs = {}
    default_config = None
    model_file = "model.keras"
    evaluation_fields = ()
    variant_field = None
    description = ""
    export_evaluation = None

    @property
    def config_class(self):
        """The dataclass of the configs."""
        return type(self.configs[self.default_config])

    def get_config(self, name, **overrides):
        """The config ``name`` with ``overrides`` (:func:`kctx.training.replace_config`)."""
        return replace_config(self.configs, name, self.name, **overrides)

    def variant(self, config):
        """What distinguishes runs of one config in the run folder's name (a block, a model)."""
        raise NotImplementedError

    def build(self, run):
        """The compiled model (its optimizer's state is built by the runner), called in
        the distribution's scope."""
        raise NotImplementedError

    def train_data(self, run, start_step, input_context):
        """The training stream from ``start_step``: global batches, or with an
        ``input_context`` this input pipeline's per-replica batches
        (:func:`kctx.data.replica_slices`)."""
        raise NotImplementedError

    def evaluate(self, run, model):
        """Final scores of the inference ``model``, a dict of JSON values."""
        raise NotImplementedError

    def eval_data(self, run, input_context):
        """Held-out batches for ``fit``'s validation every ``schedule().eval_every`` steps."""
        raise NotImplementedError(f"{self.name} has no held-out data during training")

    def schedule(self, run):
        """Steps, checkpoint interval and evaluation interval: by default the config's
        ``steps``, ``checkpoint_every`` and ``eval_every`` (0 when it has none)."""
        config = run.config
        return Schedule(config.steps, config.checkpoint_every,
                        getattr(config, "eval_every", 0) or 0)

    def check_data(self, run):
        """Raise when the data is missing, before anything is built."""

    def callbacks(self, run, model):
        """Extra Keras callbacks for ``fit``."""
        return []

    def checkpoint_objects(self, model):
        """Name → object with ``variables``: all a resume needs."""
        return {"model": model, "optimizer": model.optimizer}

    def inference_model(self, run, model):
        """The model saved and evaluated (e.g. a GAN's generator)."""
        return model

    def example_inputs(self, run, count):
        """``count`` inputs of the inference model from the workflow's data (to check an
        export against Keras and calibrate int8): by default the first examples of the
        training stream, an array or a list of arrays as ``model.predict`` takes them."""
        import numpy as np

        parts, total = [], 0
        for batch in self.train_data(run, 0, None):
            inputs = batch[0] if isinstance(batch, (tuple, list)) else batch
            parts.append(keras.tree.map_structure(keras.ops.convert_to_numpy, inputs))
            total += len(keras.tree.flatten(parts[-1])[0])
            if total >= count:
                break
        return keras.tree.map_structure(lambda *xs: np.concatenate(xs)[:count], *parts)

    def summary(self, results):
        """The line printed at the end, or None."""
        return None

    def scores(self, results):
        """The numbers that measure the run (logged to TensorBoard at the last step; what
        studies compare): by default every float of the results."""
        return {key: value for key, value in results.items() if isinstance(value, float)}

    def config(self, config=None, **overrides):
        """The config named ``config`` (default :attr:`default_config`), or the
        dataclass ``config`` itself, with ``overrides`` replaced."""
        if dataclasses.is_dataclass(config):
            return replace_config({config.name: config}, config.name, self.name, **overrides)
        return self.get_config(config or self.default_config, **overrides)

    def run_name(self, config, seed):
        return f"{self.name}-{config.name}-{self.variant(config)}-seed{seed}"
