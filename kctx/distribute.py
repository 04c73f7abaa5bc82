"""Where a run trains: the tf.distribute strategy, the keras.distribution or the PyTorch
device, behind one seam.

The runner talks to a :class:`Distribution` only, so it is the same on every
backend; :func:`get_distribution` picks it for the Keras backend in use:

- TensorFlow (:class:`StrategyDistribution`): the strategy of
  :func:`get_strategy`: TPUStrategy when a TPU resolves (a TPU VM or a pod
  slice), MultiWorkerMirroredStrategy when ``TF_CONFIG`` names a cluster of
  several workers (one process per host), MirroredStrategy when several GPUs
  are visible (or explicit devices are given), and the default
  (single-device) strategy otherwise.
- JAX (:class:`JaxDistribution`): ``keras.distribution.DataParallel`` over
  every device of every process (TPU cores, GPUs, or CPU devices; several
  hosts after ``jax.distributed.initialize``, see :func:`initialize_jax`),
  or no distribution on one device.
- PyTorch (:class:`TorchDistribution`): one device, Keras's torch device
  (``KERAS_TORCH_DEVICE``, else the GPU, else the CPU). Keras (3.15) has no
  distribution on PyTorch (``keras.distribution`` is JAX's; there is no
  ``torch.distributed`` trainer): several devices, ``--tpu`` or a cluster of
  several processes raise a ValueError that points to JAX or TensorFlow.

Each logs which. The seam's methods are what differs between backends: the
replicas, the chief and this worker's index, the input pipelines
(:meth:`Distribution.dataset`), the scope models are built in, the context
``fit`` / ``evaluate`` run in, and sums over the workers.
"""

import contextlib
import json
import os

__all__ = ["as_distribution", "Distribution", "get_distribution", "get_strategy", "initialize_jax",
           "is_chief", "JAX_CLUSTER_VARIABLES", "JaxDistribution", "multi_worker_keras",
           "StrategyDistribution", "sum_over_workers", "TorchDistribution", "worker_index"]


def _cluster_spec():
    """The ``cluster`` of ``TF_CONFIG`` when it names more than one task, else None."""
    text = os.environ.get("TF_CONFIG")
    if not text:
        return None
    try:
        config = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"TF_CONFIG is not valid JSON ({error}). Received: "
                         f"TF_CONFIG={text[:200]!r}") from None
    cluster = config.get("cluster") or {}
    tasks = sum(len(cluster.get(kind, ())) for kind in ("chief", "worker"))
    return cluster if tasks > 1 else None


def get_strategy(tpu=None, devices=None):
    """The tf.distribute strategy to train under.

    Args:
        tpu: TPU name or address for ``TPUClusterResolver`` (``"local"`` on a
            TPU VM); ``None`` to use ``TF_CONFIG`` / GPUs / CPU.
        devices: explicit device names for a MirroredStrategy (e.g. two logical
            CPUs, see ``kctx.testing.configure_logical_cpus``).

    With ``TF_CONFIG`` naming several workers (``{"cluster": {"worker":
    ["host1:port", "host2:port"]}, "task": {"type": "worker", "index": i}}``,
    one process per worker), the strategy is
    ``MultiWorkerMirroredStrategy``; create it first thing in the process.

    Raises:
        RuntimeError: when ``tpu`` is given but no TPU can be reached.
    """
    import tensorflow as tf

    if tpu:
        try:
            resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
                tpu="" if tpu == "local" else tpu
            )
            tf.config.experimental_connect_to_cluster(resolver)
            tf.tpu.experimental.initialize_tpu_system(resolver)
        except Exception as error:  # noqa: BLE001 - resolver errors vary (URLError, NotFound)
            raise RuntimeError(
                f"Could not reach TPU {tpu!r} ({type(error).__name__}: {str(error)[:200]}). "
                "Pass --tpu local on a TPU VM, or a TPU name/grpc address; drop --tpu for CPU/GPU."
            ) from None
        strategy = tf.distribute.TPUStrategy(resolver)
    elif devices:
        strategy = tf.distribute.MirroredStrategy(list(devices))
    elif _cluster_spec():
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    elif len(tf.config.list_logical_devices("GPU")) > 1:
        strategy = tf.distribute.MirroredStrategy()
    else:
        strategy = tf.distribute.get_strategy()
    return strategy


def _task(strategy):
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not getattr(resolver, "task_type", None):
        return None
    return f"{resolver.task_type}:{resolver.task_id}"


def _worker_count(strategy):
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or type(strategy).__name__.startswith("TPU"):
        return 1
    spec = resolver.cluster_spec().as_dict()
    return sum(len(spec.get(kind, ())) for kind in ("chief", "worker")) or 1


def is_chief(strategy):
    """Whether this process writes the run's files: always, except on the non-chief
    workers of a multi-worker strategy (the chief is task ``chief``, else worker 0)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or type(strategy).__name__.startswith("TPU"):
        return True
    task_type, task_id = getattr(resolver, "task_type", None), getattr(resolver, "task_id", 0)
    if task_type is None:
        return True
    spec = resolver.cluster_spec().as_dict()
    if "chief" in spec:
        return task_type == "chief"
    return task_type == "worker" and int(task_id or 0) == 0


def worker_index(strategy):
    """``(index, count)`` of this worker among a multi-worker strategy's workers (the
    chief first); ``(0, 1)`` in a single process (TPU hosts included: TPUStrategy
    shards its input per host by itself)."""
    count = _worker_count(strategy)
    if count == 1:
        return 0, 1
    resolver = strategy.cluster_resolver
    spec = resolver.cluster_spec().as_dict()
    offset = len(spec.get("chief", ())) if resolver.task_type == "worker" else 0
    return offset + int(resolver.task_id or 0), count


def sum_over_workers(strategy, value):
    """Sum a NumPy array over the workers of a multi-worker strategy (each worker
    passes its own, e.g. the confusion matrix of its evaluation shard); the value
    itself in a single process. Every worker must call it."""
    import numpy as np
    import tensorflow as tf

    index, count = worker_index(strategy)
    if count == 1:
        return value
    local = strategy.num_replicas_in_sync // count
    array = tf.constant(np.asarray(value, np.float64) / local)
    total = strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(lambda: tf.identity(array)),
                            axis=None)
    return total.numpy()


@contextlib.contextmanager
def multi_worker_keras(model, strategy, dataset):
    """Let ``fit`` / ``evaluate`` run under a multi-worker strategy (a no-op otherwise).

    Keras 3 (3.15) fails under ``MultiWorkerMirroredStrategy`` with several
    workers (keras-team/keras#20585, tensorflow/tensorflow#72388) in two places:

    1. it builds the model from the first batch reduced by ``strategy.reduce``,
       which cannot reduce a nested batch ("Attempt to convert a value
       (PerReplica...)"): here the model, its loss and metrics are built from
       the dataset's element spec, and Keras runs in the strategy's scope with
       its own strategy reference cleared, so it skips that step;
    2. it reduces each step's logs with ``strategy.reduce("MEAN", v, axis=0)``,
       which fails on scalars ("Invalid reduction dimension 0"): the logs are
       metric results, which Keras keeps in variables summed over all replicas
       at every update, so every replica holds the global value and its local
       one is taken instead, as in a single process.
    """
    from keras.src.backend.tensorflow import trainer as tf_trainer

    if worker_index(strategy)[1] == 1:
        yield
        return
    import tensorflow as tf

    spec = tf.nest.map_structure(  # a replica's batch (PerReplicaSpec holds one per replica)
        lambda item: getattr(item, "_value_specs", (item,))[0], dataset.element_spec)
    with strategy.scope():
        model._symbolic_build(data_batch=spec)  # noqa: SLF001 - see 1. above
    saved = model._distribute_strategy, tf_trainer._collective_all_reduce_multi_worker  # noqa: SLF001
    model._distribute_strategy = None  # noqa: SLF001
    tf_trainer._collective_all_reduce_multi_worker = lambda strategy: False  # see 2. above
    try:
        with strategy.scope():
            yield
    finally:
        model._distribute_strategy, tf_trainer._collective_all_reduce_multi_worker = saved


class Distribution:
    """What a run needs of its distribution, the same on every backend.

    Attributes:
        backend: the Keras backend it trains with (``"tensorflow"``, ``"jax"``,
            ``"torch"``).
        name: what ``run.json`` records (the strategy's class, ``"DataParallel"``,
            ``"PyTorch single device"``).
        strategy: the ``tf.distribute`` strategy (None on JAX and PyTorch).
    """

    backend = None
    name = None
    strategy = None

    @property
    def replicas(self):
        """Replicas in sync (devices a global batch is split over)."""
        raise NotImplementedError

    @property
    def num_replicas_in_sync(self):
        """:attr:`replicas`, under ``tf.distribute``'s name."""
        return self.replicas

    @property
    def chief(self):
        """Whether this process writes the run's files."""
        raise NotImplementedError

    @property
    def worker(self):
        """``(index, count)`` of this worker (process) among the run's (``(0, 1)`` in one)."""
        raise NotImplementedError

    @property
    def devices(self):
        """The devices trained on, as strings."""
        raise NotImplementedError

    def scope(self):
        """The context models and optimizers are built in."""
        return contextlib.nullcontext()

    def fitting(self, model, dataset):
        """The context ``model.fit`` / ``model.evaluate`` run in on ``dataset``."""
        return contextlib.nullcontext()

    def dataset(self, dataset_fn):
        """``dataset_fn(input_context)`` for ``fit`` / ``evaluate`` (see the subclasses)."""
        return dataset_fn(None)

    def sum_over_workers(self, value):
        """A NumPy array summed over the workers (the value itself in one process); every
        worker must call it."""
        return value

    def describe(self):
        """The log line naming the distribution."""
        workers = self.worker[1]
        return (f"distribution: {self.name} with {self.replicas} replica(s)"
                + (f" on {workers} workers (this is worker {self.worker[0]})"
                   if workers > 1 else ""))


class StrategyDistribution(Distribution):
    """A ``tf.distribute`` strategy behind :class:`Distribution` (TensorFlow backend).

    Args:
        strategy: the strategy (default: the current one, ``tf.distribute.get_strategy()``).

    Examples:
        >>> import tensorflow as tf
        >>> distribution = StrategyDistribution(tf.distribute.get_strategy())
        >>> distribution.replicas, distribution.chief
        (1, True)
    """

    backend = "tensorflow"

    def __init__(self, strategy=None):
        if strategy is None:
            import tensorflow as tf

            strategy = tf.distribute.get_strategy()
        self.strategy = strategy
        self.name = type(strategy).__name__

    @property
    def replicas(self):
        return self.strategy.num_replicas_in_sync

    @property
    def chief(self):
        return is_chief(self.strategy)

    @property
    def worker(self):
        return worker_index(self.strategy)

    @property
    def devices(self):
        import tensorflow as tf

        try:
            devices = self.strategy.extended.worker_devices
        except (AttributeError, RuntimeError):  # the default strategy has none: its device
            devices = [device.name for device in (tf.config.list_logical_devices("GPU")[:1]
                                                  or tf.config.list_logical_devices("CPU")[:1])]
        return [str(device) for device in devices]

    def scope(self):
        return self.strategy.scope()

    def fitting(self, model, dataset):

        return multi_worker_keras(model, self.strategy, dataset)

    def dataset(self, dataset_fn):
        """Under several replicas, per-replica batches from each input pipeline (one per
        host) through ``strategy.distribute_datasets_from_function``; on one device
        ``dataset_fn(None)``, global batches (a distributed dataset there makes
        single-threaded runs differ in the last bit from run to run)."""
        if self.replicas > 1:
            return self.strategy.distribute_datasets_from_function(dataset_fn)
        return dataset_fn(None)

    def sum_over_workers(self, value):
        return sum_over_workers(self.strategy, value)

    def describe(self):
        return (f"distribution: {self.name} with {self.replicas} replica(s)"
                + (f" on {_worker_count(self.strategy)} workers (this is task "
                   f"{_task(self.strategy)})" if _worker_count(self.strategy) > 1 else ""))


class JaxDistribution(Distribution):
    """``keras.distribution.DataParallel`` behind :class:`Distribution` (JAX backend).

    Variables are replicated on every device, each global batch is split over
    them along its first axis, and XLA's SPMD partitioner all-reduces the
    gradients inside the jitted step (so statistics computed over the batch,
    batch normalisation's included, are the global batch's). With several
    processes (hosts, after :func:`initialize_jax`) every process builds only
    its own part of each global batch: its input pipeline is pipeline ``i`` of
    ``P``, one "replica" of ``P`` in :func:`kctx.data.replica_slices`, and
    Keras assembles the global batch from the parts
    (``jax.make_array_from_process_local_data``). On one device there is no
    distribution (Keras's plain JAX path).

    Args:
        devices: the JAX devices (default ``jax.devices()``: every device of every
            process), or a ``keras.distribution.Distribution`` to use as it is.

    Examples:
        On the JAX backend (``KERAS_BACKEND=jax``):

        >>> distribution = JaxDistribution()  # doctest: +SKIP
        >>> with distribution.scope():  # doctest: +SKIP
        ...     model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
        >>> distribution.replicas == len(jax.devices())  # doctest: +SKIP
        True
    """

    backend = "jax"

    def __init__(self, devices=None):
        import jax
        import keras

        if isinstance(devices, _keras_distribution_classes()):
            self.keras_distribution = devices
            self._devices = list(devices.device_mesh.devices.flat)
        else:
            self._devices = list(devices) if devices is not None else jax.devices()
            self.keras_distribution = None
            if len(self._devices) > 1:
                self.keras_distribution = keras.distribution.DataParallel(
                    devices=self._devices, auto_shard_dataset=False)
        self.name = ("DataParallel" if self.keras_distribution is not None else
                     "JAX single device")

    @property
    def replicas(self):
        return len(self._devices)

    @property
    def chief(self):
        import jax

        return jax.process_index() == 0

    @property
    def worker(self):
        import jax

        return jax.process_index(), jax.process_count()

    @property
    def devices(self):
        return [str(device) for device in self._devices]

    def scope(self):
        if self.keras_distribution is None:
            return contextlib.nullcontext()
        return self.keras_distribution.scope()

    def fitting(self, model, dataset):
        return self.scope()

    def dataset(self, dataset_fn):
        """This process's part of every global batch (all of it in one process), which
        Keras splits over its devices.

        On one device ``dataset_fn(None)``. On ``R`` devices over ``P`` processes,
        ``dataset_fn`` gets the input context of ``tf.distribute`` (``P`` pipelines,
        ``R`` replicas), so it yields per-replica batches as it does under
        ``distribute_datasets_from_function`` (held-out sets padded with weight-0
        examples to equal batches on every replica); this process's ``R / P``
        consecutive ones are concatenated into its part of the global batch.
        """
        if self.replicas == 1:
            return dataset_fn(None)
        import tensorflow as tf

        index, count = self.worker
        dataset = dataset_fn(tf.distribute.InputContext(num_input_pipelines=count,
                                                        input_pipeline_id=index,
                                                        num_replicas_in_sync=self.replicas))
        local = self.replicas // count
        if local == 1:
            return dataset

        def merge(value):  # (local, b, ...) -> (local·b, ...)
            return tf.reshape(value, tf.concat([[-1], tf.shape(value)[2:]], 0))

        def concatenate(*parts):
            return tf.nest.map_structure(merge, parts if len(parts) > 1 else parts[0])

        return dataset.batch(local, drop_remainder=True).map(concatenate)

    def sum_over_workers(self, value):
        """Summed in float64 on the host: each process's float64 value travels as two
        float32 parts (JAX without x64 has no float64 arrays), exact to 2⁻⁴⁸ of it."""
        import numpy as np

        if self.worker[1] == 1:
            return value
        from jax.experimental import multihost_utils

        value = np.asarray(value, np.float64)
        high = value.astype(np.float32)
        low = (value - high.astype(np.float64)).astype(np.float32)
        parts = multihost_utils.process_allgather(np.stack([high, low]))
        return np.asarray(parts, np.float64).sum(axis=(0, 1))

    def describe(self):
        line = super().describe()
        return line + f" ({', '.join(self.devices[:8])}{', ...' if self.replicas > 8 else ''})"


class TorchDistribution(Distribution):
    """One PyTorch device behind :class:`Distribution` (PyTorch backend).

    Keras (3.15) has no distribution on PyTorch, so a run trains on one device in
    one process: Keras's torch device (``KERAS_TORCH_DEVICE``, else ``cuda``
    when a GPU is visible, else ``cpu``), on which Keras creates the variables
    and runs ``fit``. The scope and the ``fit`` context are null contexts, the
    input pipelines yield global batches (``dataset_fn(None)``) and sums over
    the workers are the values themselves.

    Args:
        device: the device trained on (a ``torch.device`` or its name, e.g.
            ``"cuda:0"``); default Keras's torch device. Another device than
            Keras's raises (start Python with ``KERAS_TORCH_DEVICE`` set to it).

    Raises:
        ValueError: when ``device`` is not Keras's torch device.
    """

    backend = "torch"
    name = "PyTorch single device"

    def __init__(self, device=None):
        import torch

        keras_device = _torch_device()
        if device is not None and not _same_torch_device(torch.device(device), keras_device):
            raise ValueError(
                f"Keras creates its variables and runs fit on one PyTorch device, {keras_device}: "
                "start Python with KERAS_TORCH_DEVICE set to the device to train on. "
                f"Received: device={str(device)!r}")
        self._device = keras_device

    @property
    def replicas(self):
        return 1

    @property
    def chief(self):
        return True

    @property
    def worker(self):
        return 0, 1

    @property
    def devices(self):
        return [str(self._device)]

    def describe(self):
        """The log line, which says when GPUs are left idle (Keras trains on one)."""
        import torch

        visible = torch.cuda.device_count() if self._device.type == "cuda" else 1
        return super().describe() + f" ({self._device}" + (
            f"; {visible - 1} more visible GPU(s) idle: Keras has no distribution on PyTorch, "
            "use JAX or TensorFlow for several)" if visible > 1 else ")")


def _torch_device():
    """The ``torch.device`` Keras puts tensors on (a tensor it creates says where)."""
    import keras

    return keras.ops.zeros(()).device


def _same_torch_device(device, other):
    """Whether two ``torch.device`` name the same device (``cuda`` is ``cuda:0``)."""
    return device.type == other.type and (device.index or 0) == (other.index or 0)


def _check_torch_single_device(tpu, devices):
    """Raise a ValueError when a PyTorch run asks for more than one device: ``tpu``,
    several ``devices``, or an environment naming a cluster of several processes
    (``TF_CONFIG``, :data:`JAX_CLUSTER_VARIABLES`, ``KCTX_JAX_DISTRIBUTED``, torchrun's
    ``WORLD_SIZE``)."""
    received = []
    if tpu:
        received.append(f"tpu={tpu!r}")
    if devices is not None and len(devices) > 1:
        received.append(f"devices={[str(device) for device in devices]!r}")
    received += [f"{key}={os.environ[key]}" for key in (*JAX_CLUSTER_VARIABLES,
                                                        "KCTX_JAX_DISTRIBUTED")
                 if os.environ.get(key)]
    if os.environ.get("WORLD_SIZE", "1") not in ("", "1"):
        received.append(f"WORLD_SIZE={os.environ['WORLD_SIZE']}")
    if _cluster_spec():
        received.append("TF_CONFIG naming a cluster of several tasks")
    if received:
        raise ValueError(
            "Keras provides no distribution on the PyTorch backend (keras.distribution is "
            "JAX's, and Keras has no torch.distributed trainer): a PyTorch run trains on one "
            "device in one process. For several devices, a TPU or several hosts use "
            "KERAS_BACKEND=jax (DataParallel) or KERAS_BACKEND=tensorflow (tf.distribute). "
            f"Received: {', '.join(received)}")


def _keras_distribution_classes():  # keras.distribution has no public base class
    import keras

    return keras.distribution.DataParallel, keras.distribution.ModelParallel


def as_distribution(value):
    """A :class:`Distribution` from one, a ``tf.distribute`` strategy or a
    ``keras.distribution.Distribution`` (None: the backend's default in this process:
    the current strategy on TensorFlow, the first local device on JAX, Keras's torch
    device on PyTorch)."""
    if isinstance(value, Distribution):
        return value
    import keras

    if value is None:
        backend = keras.backend.backend()
        if backend == "tensorflow":
            return StrategyDistribution()
        return TorchDistribution() if backend == "torch" else JaxDistribution(_first_device())
    if isinstance(value, _keras_distribution_classes()):
        return JaxDistribution(value)
    return StrategyDistribution(value)


def _first_device():
    import jax

    return jax.local_devices()[:1]


JAX_CLUSTER_VARIABLES = ("KERAS_DISTRIBUTION_JOB_ADDRESSES", "KERAS_DISTRIBUTION_NUM_PROCESSES",
                         "KERAS_DISTRIBUTION_PROCESS_ID")


def initialize_jax(log=print):
    """``jax.distributed.initialize`` when the environment names a cluster of several
    processes (``KERAS_DISTRIBUTION_JOB_ADDRESSES`` (the coordinator's ``host:port``),
    ``KERAS_DISTRIBUTION_NUM_PROCESSES`` and ``KERAS_DISTRIBUTION_PROCESS_ID``, read by
    ``keras.distribution.initialize``), or when ``KCTX_JAX_DISTRIBUTED=1`` asks for
    JAX's own detection (TPU pod slices, SLURM); a no-op otherwise or when done already.
    Call it before any JAX computation.

    Returns:
        Whether this process is part of a cluster of several processes.
    """
    import keras

    asked = any(os.environ.get(key) for key in JAX_CLUSTER_VARIABLES) or \
        os.environ.get("KCTX_JAX_DISTRIBUTED") == "1"
    if not asked:
        return False
    import jax

    if not jax.distributed.is_initialized():
        if any(os.environ.get(key) for key in JAX_CLUSTER_VARIABLES):
            keras.distribution.initialize()
        else:
            jax.distributed.initialize()
        if log:
            log(f"jax.distributed: process {jax.process_index()} of {jax.process_count()}")
    return jax.process_count() > 1


def get_distribution(tpu=None, devices=None, strategy=None, log=print):
    """The :class:`Distribution` to train under, for the Keras backend in use.

    Args:
        tpu: TensorFlow only: the TPU for ``TPUStrategy`` (see :func:`get_strategy`).
            On JAX the TPU's cores are JAX devices: install ``jax[tpu]`` and leave
            ``tpu`` unset.
        devices: explicit devices: device names for a MirroredStrategy
            (TensorFlow), ``jax.Device`` objects (JAX), at most one device on
            PyTorch (Keras's torch device, see :class:`TorchDistribution`).
        strategy: use this one: a ``tf.distribute`` strategy, a
            ``keras.distribution.Distribution`` or a :class:`Distribution`.
        log: called with one line naming the distribution and replica count.

    Returns:
        A :class:`StrategyDistribution`, a :class:`JaxDistribution` or a
        :class:`TorchDistribution`.

    Raises:
        ValueError: ``tpu`` on a backend other than TensorFlow; on PyTorch, several
            devices or an environment naming a cluster of several processes (Keras
            has no distribution there); a backend other than TensorFlow, JAX and
            PyTorch.
        RuntimeError: when ``tpu`` is given but no TPU can be reached.

    Examples:
        >>> distribution = get_distribution(log=None)
        >>> with distribution.scope():
        ...     model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
        >>> distribution.replicas >= 1
        True
    """
    import keras

    backend = keras.backend.backend()
    if strategy is not None:
        distribution = as_distribution(strategy)
    elif backend == "tensorflow":
        distribution = StrategyDistribution(get_strategy(tpu, devices))
    elif backend == "jax":
        if tpu:
            raise ValueError(
                "--tpu selects TensorFlow's TPUStrategy. On the JAX backend the TPU's cores "
                "are JAX devices: install jax[tpu] (with tensorflow-cpu for tf.data) and "
                f"drop --tpu; KCTX_JAX_DISTRIBUTED=1 joins the hosts of a pod slice. "
                f"Received: tpu={tpu!r}")
        initialize_jax(log=log)
        distribution = JaxDistribution(devices)
    elif backend == "torch":
        _check_torch_single_device(tpu, devices)
        distribution = TorchDistribution(devices[0] if devices else None)
    else:
        raise ValueError(f"kctx runs train with the tensorflow, jax or torch backend. "
                         f"Received: KERAS_BACKEND={backend!r}")
    if log and strategy is None:
        log(distribution.describe())
    return distribution
