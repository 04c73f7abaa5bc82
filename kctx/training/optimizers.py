"""The recipes' optimizers and learning-rate schedules, shared by the workflows.

- :class:`OptimizerGroup`: several optimizers, each on its own variables, behind one
  optimizer's interface (a GAN's G and D optimizers as ``model.optimizer``, so that
  Keras's JAX ``fit``, which carries ``model.optimizer.variables`` through its
  stateless steps, carries both).

- :func:`sgd`: SGD with momentum and decoupled weight decay on kernels only (HamNet's
  segmentation recipe, the ImageNet recipes).
- :class:`ParamwiseAdamW`: PyTorch's AdamW with mmengine's parameter-wise options: a
  learning-rate and a weight-decay multiplier per variable, chosen by a substring of
  its name (SegNeXt's recipe: the decode head at 10× the learning rate, the norms
  without weight decay).
- :class:`WarmupPolyDecay`: mmengine's ``LinearLR`` warm-up followed by ``PolyLR``,
  as the mmsegmentation SegNeXt configs chain them.

Both classes are registered Keras serialisables: a model saved with them reloads with
them, and their state is the optimizer's variables, which
:class:`kctx.training.StepCheckpoint` saves and restores like any other optimizer's.
"""

import math

import keras
from keras import ops


def sgd(learning_rate, momentum=0.9, weight_decay=None):
    """SGD with momentum and decoupled weight decay on kernels only (not on biases or
    batch-norm scales and offsets), as the ImageNet and segmentation recipes use."""
    optimizer = keras.optimizers.SGD(learning_rate, momentum=momentum,
                                     weight_decay=weight_decay or None)
    optimizer.exclude_from_weight_decay(var_names=["bias", "gamma", "beta"])
    return optimizer


def paramwise_multipliers(name, paramwise):
    """``(lr_mult, decay_mult)`` of the weight called ``name`` under mmengine's rule.

    ``paramwise`` is mmengine's ``paramwise_cfg.custom_keys``: {key: {"lr_mult": m,
    "decay_mult": d}}. The keys are sorted alphabetically, then by length, longest
    first; the first key that is a substring of ``name`` gives both multipliers (a
    missing one is 1) and no other key applies; a name no key matches gets (1, 1).

    Args:
        name: the weight's name (a Keras variable's ``path``, e.g.
            ``"decode_head-conv_seg/kernel"``).
        paramwise: the custom keys, or None.

    Returns:
        ``(lr_mult, decay_mult)`` as floats.

    Examples:
        >>> keys = {"head": {"lr_mult": 10.0}, "norm": {"decay_mult": 0.0}}
        >>> paramwise_multipliers("block1-0-norm1/gamma", keys)
        (1.0, 0.0)
        >>> paramwise_multipliers("decode_head-hamburger/norm/gamma", keys)  # "head" < "norm"
        (10.0, 1.0)

    Reference:
        mmengine 0.10, ``DefaultOptimWrapperConstructor.add_params``.
    """
    for key in sorted(sorted(paramwise or {}), key=len, reverse=True):
        if key in name:
            options = paramwise[key]
            return float(options.get("lr_mult", 1.0)), float(options.get("decay_mult", 1.0))
    return 1.0, 1.0


def check_paramwise(paramwise, argument="paramwise"):
    """Raise a ValueError naming ``argument`` unless ``paramwise`` is None or a dict of
    non-empty string keys to dicts of finite, non-negative ``lr_mult`` / ``decay_mult``."""
    if paramwise is None:
        return paramwise
    problem = not isinstance(paramwise, dict)
    for key, options in ({} if problem else paramwise).items():
        problem = problem or not (isinstance(key, str) and key and isinstance(options, dict)
                                  and set(options) <= {"lr_mult", "decay_mult"})
        for value in (options.values() if isinstance(options, dict) else ()):
            problem = problem or isinstance(value, bool) or not isinstance(
                value, (int, float)) or not math.isfinite(value) or value < 0
    if problem:
        raise ValueError(f"`{argument}` must map name substrings to "
                         '{"lr_mult": m, "decay_mult": d} (finite, >= 0), e.g. '
                         '{"head": {"lr_mult": 10}, "norm": {"decay_mult": 0}}. '
                         f"Received: {argument}={paramwise!r}")
    return paramwise


@keras.saving.register_keras_serializable(package="kctx")
class ParamwiseAdamW(keras.optimizers.Optimizer):
    """PyTorch's AdamW with mmengine's per-parameter learning-rate and decay multipliers.

    For a variable with multipliers (m_lr, m_wd) (:func:`paramwise_multipliers` of its
    ``path``), at step t = 1, 2, ... with the scheduled learning rate η_t and
    lr = m_lr · η_t, wd = m_wd · ``weight_decay``:

        θ ← θ · (1 − lr · wd)
        m ← β₁ m + (1 − β₁) g,    v ← β₂ v + (1 − β₂) g²
        θ ← θ − lr / (1 − β₁ᵗ) · m / (√v / √(1 − β₂ᵗ) + ε)

    which is ``torch.optim.AdamW`` with one parameter group per (m_lr, m_wd), as
    mmengine's ``DefaultOptimWrapperConstructor`` builds them: the decoupled decay of
    a variable is scaled by its own learning rate. (Keras' ``AdamW`` differs in ε,
    added to √v before the bias correction, and has no per-variable rates.) Variables
    excluded with ``exclude_from_weight_decay`` get no decay.

    The multipliers follow from the variables' names when the optimizer is built, so
    the state to checkpoint is the usual one: ``iterations`` and the moments. On PyTorch
    the update runs on each group of variables with equal multipliers at once
    (``torch._foreach_*``), with the per-variable update's values.

    Args:
        learning_rate: a float or a ``keras.optimizers.schedules.LearningRateSchedule``.
        weight_decay: the base decoupled weight decay.
        beta_1: the first moment's decay rate.
        beta_2: the second moment's decay rate.
        epsilon: ε, added to the bias-corrected √v (PyTorch's default 1e-8).
        paramwise: mmengine's ``custom_keys`` ({name substring: {"lr_mult": m,
            "decay_mult": d}}), or None for the same settings everywhere.
        name: the optimizer's name.
        **kwargs: other ``keras.optimizers.Optimizer`` arguments (``clipnorm``, ...).

    Examples:
        >>> optimizer = ParamwiseAdamW(6e-5, weight_decay=0.01,
        ...                            paramwise={"head": {"lr_mult": 10.0}})
        >>> optimizer.build([keras.Variable(1.0, name="w")])
        >>> optimizer.multipliers
        [(1.0, 1.0)]

    Reference:
        Loshchilov and Hutter, "Decoupled Weight Decay Regularization", ICLR 2019,
        Algorithm 2; ``torch.optim.AdamW`` (PyTorch 2.x); mmengine's
        ``DefaultOptimWrapperConstructor`` (``paramwise_cfg.custom_keys``).
    """

    def __init__(self, learning_rate=0.001, weight_decay=0.01, beta_1=0.9, beta_2=0.999,
                 epsilon=1e-8, paramwise=None, name="paramwise_adamw", **kwargs):
        if weight_decay is None or isinstance(weight_decay, bool) or not isinstance(
                weight_decay, (int, float)) or not math.isfinite(weight_decay) or \
                weight_decay < 0:
            raise ValueError("`weight_decay` must be a finite number >= 0. "
                             f"Received: weight_decay={weight_decay!r}")
        super().__init__(learning_rate=learning_rate, weight_decay=float(weight_decay),
                         name=name, **kwargs)
        self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, epsilon
        self.paramwise = check_paramwise(paramwise)
        self.multipliers = []

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        self._momentums, self._velocities = self.add_optimizer_variables(
            var_list, ["momentum", "velocity"])
        self.multipliers = []
        for variable in var_list:
            lr_mult, decay_mult = paramwise_multipliers(variable.path, self.paramwise)
            if not self._use_weight_decay(variable):
                decay_mult = 0.0
            self.multipliers.append((lr_mult, decay_mult))

    def _apply_weight_decay(self, variables):
        """The decay is part of :meth:`update_step` (per variable, PyTorch's order)."""

    def update_step(self, gradient, variable, learning_rate):
        index = self._get_variable_index(variable)
        lr_mult, decay_mult = self.multipliers[index]
        dtype = variable.dtype
        lr = ops.cast(learning_rate, dtype) * lr_mult
        decay = self.weight_decay * decay_mult
        gradient = ops.cast(gradient, dtype)
        step = ops.cast(self.iterations + 1, dtype)
        m = self._momentums[index]
        v = self._velocities[index]
        if decay:
            self.assign(variable, ops.multiply(variable, 1.0 - lr * decay))
        self.assign(m, ops.add(ops.multiply(m, self.beta_1), ops.multiply(gradient,
                                                                           1.0 - self.beta_1)))
        self.assign(v, ops.add(ops.multiply(v, self.beta_2),
                               ops.multiply(ops.square(gradient), 1.0 - self.beta_2)))
        bias_1 = 1.0 - ops.power(ops.cast(self.beta_1, dtype), step)
        bias_2 = 1.0 - ops.power(ops.cast(self.beta_2, dtype), step)
        denominator = ops.add(ops.divide(ops.sqrt(v), ops.sqrt(bias_2)), self.epsilon)
        self.assign_sub(variable, ops.multiply(lr / bias_1, ops.divide(m, denominator)))

    def _backend_update_step(self, grads, trainable_variables, learning_rate):
        if keras.backend.backend() != "torch":
            return super()._backend_update_step(grads, trainable_variables, learning_rate)
        return self._torch_update_step(grads, trainable_variables, learning_rate)

    def _torch_update_step(self, grads, variables, learning_rate):
        """:meth:`update_step` on every variable at once, on PyTorch: its operations in its
        order, each a ``torch._foreach_*`` call over the variables of one (m_lr, m_wd, dtype)
        group, so the values are those of the per-variable loop. That loop is about 20 Keras
        operations per variable, each with Keras' host-side dispatch: for SegNeXt-T's 457
        variables half of an eager training step at 32² crops on the CPU. The grouping
        follows :func:`paramwise_multipliers`, like ``torch.optim.AdamW``'s parameter groups
        (whose ``foreach`` form is its default on a GPU)."""
        import torch

        groups = {}
        for gradient, variable in zip(grads, variables):
            index = self._get_variable_index(variable)
            key = (*self.multipliers[index], variable.dtype)
            groups.setdefault(key, []).append((gradient, variable, index))
        with torch.no_grad():
            for (lr_mult, decay_mult, dtype), members in groups.items():
                lr = ops.cast(learning_rate, dtype) * lr_mult
                decay = self.weight_decay * decay_mult
                step = ops.cast(self.iterations + 1, dtype)
                values = [variable.value for _, variable, _ in members]
                gradients = [ops.cast(gradient, dtype) for gradient, _, _ in members]
                m = [self._momentums[index].value for _, _, index in members]
                v = [self._velocities[index].value for _, _, index in members]
                if decay:
                    torch._foreach_mul_(values, 1.0 - lr * decay)
                torch._foreach_mul_(m, self.beta_1)
                torch._foreach_add_(m, torch._foreach_mul(gradients, 1.0 - self.beta_1))
                torch._foreach_mul_(v, self.beta_2)
                squares = torch._foreach_mul(gradients, gradients)
                torch._foreach_mul_(squares, 1.0 - self.beta_2)
                torch._foreach_add_(v, squares)
                bias_1 = 1.0 - ops.power(ops.cast(self.beta_1, dtype), step)
                bias_2 = 1.0 - ops.power(ops.cast(self.beta_2, dtype), step)
                denominators = torch._foreach_sqrt(v)
                torch._foreach_div_(denominators, ops.sqrt(bias_2))
                torch._foreach_add_(denominators, self.epsilon)
                updates = torch._foreach_div(m, denominators)
                torch._foreach_mul_(updates, lr / bias_1)
                torch._foreach_sub_(values, updates)

    def get_config(self):
        config = super().get_config()
        config.update(beta_1=self.beta_1, beta_2=self.beta_2, epsilon=self.epsilon,
                      paramwise=self.paramwise)
        return config


@keras.saving.register_keras_serializable(package="kctx")
class WarmupPolyDecay(keras.optimizers.schedules.LearningRateSchedule):
    """A linear warm-up, then polynomial decay to ``end_learning_rate`` at the last step.

    With η the learning rate, W = ``warmup_steps``, N = ``steps``, r = ``warmup_ratio``
    and p = ``power``, the rate at step t (0-based, the step whose update it scales) is

        t < W:  η · (r + (1 − r) · t / (W − 1))
        t ≥ W:  η_end + (η − η_end) · (1 − (t − W) / (N − W − 1))^p,

    which is mmengine's ``LinearLR(start_factor=r, begin=0, end=W)`` chained with
    ``PolyLR(power=p, eta_min=η_end, begin=W, end=N)``, stepped every iteration: the
    warm-up reaches η at step W − 1, and the decay reaches η_end at step N − 1, the
    last update (its value at each step equals mmengine's; see the tests). A run shorter
    than its warm-up (W ≥ N, e.g. a smoke test) stops on the ramp, as mmengine's would.

    Args:
        learning_rate: η.
        steps: N, the training steps.
        warmup_steps: W (0: no warm-up).
        warmup_ratio: r, the warm-up's first factor.
        power: p.
        end_learning_rate: η_end.
        name: the schedule's name.

    Examples:
        >>> schedule = WarmupPolyDecay(6e-5, steps=160_000, warmup_steps=1500)
        >>> [round(float(schedule(t)) / 6e-5, 4) for t in (0, 750, 1499, 1500, 80_750, 159_999)]
        [0.0, 0.5003, 1.0, 1.0, 0.5, 0.0]

    Reference:
        The mmsegmentation 1.x SegNeXt configs (``param_scheduler``); mmengine 0.10
        ``LinearParamScheduler`` and ``PolyParamScheduler``.
    """

    def __init__(self, learning_rate, steps, warmup_steps=0, warmup_ratio=1e-6, power=1.0,
                 end_learning_rate=0.0, name="warmup_poly_decay"):
        super().__init__()
        for key, value, minimum in (("steps", steps, 1), ("warmup_steps", warmup_steps, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ValueError(f"`{key}` must be an integer >= {minimum}. "
                                 f"Received: {key}={value!r}")
        self.learning_rate = float(learning_rate)
        self.steps, self.warmup_steps = steps, warmup_steps
        self.warmup_ratio, self.power = float(warmup_ratio), float(power)
        self.end_learning_rate = float(end_learning_rate)
        self.name = name

    def __call__(self, step):
        step = ops.cast(step, "float32")
        warm = self.warmup_steps
        ramp = self.warmup_ratio + (1.0 - self.warmup_ratio) * step / max(warm - 1, 1)
        decay_steps = max(self.steps - warm - 1, 1)
        # 1 − (t − W) / (N − W − 1) as (N − 1 − t) / (N − W − 1): integers exact in float32,
        # so the last steps' small rates keep their relative precision.
        left = ops.clip((self.steps - 1 - step) / decay_steps, 0.0, 1.0)
        poly = self.end_learning_rate + (self.learning_rate - self.end_learning_rate) * \
            ops.power(left, self.power)
        return ops.where(step < warm, self.learning_rate * ops.minimum(ramp, 1.0), poly)

    def get_config(self):
        return {"learning_rate": self.learning_rate, "steps": self.steps,
                "warmup_steps": self.warmup_steps, "warmup_ratio": self.warmup_ratio,
                "power": self.power, "end_learning_rate": self.end_learning_rate,
                "name": self.name}


class OptimizerGroup:
    """Several built optimizers, each updating its own variables, as one optimizer.

    Keras's ``fit`` carries one optimizer's state: on JAX its stateless training
    step takes and returns ``model.optimizer.variables`` and nothing else, so a
    model with two optimizers (a GAN's G and D, TTUR) sets a group as its
    ``optimizer``: the group's :attr:`variables` are all of its optimizers'
    (in order), :meth:`apply` / :meth:`stateless_apply` hand each gradient to the
    optimizer of its variable, and :meth:`split` cuts a list of optimizer values
    into each optimizer's, for a ``train_step`` that calls them one by one. The
    optimizers keep their own variables, so checkpoints may list them apart.

    Args:
        pairs: ``(optimizer, variables)`` pairs: each optimizer updates those
            variables (it is built on them when it is not built yet).

    Examples:
        >>> generator = keras.Sequential([keras.Input((4,)), keras.layers.Dense(4)])
        >>> discriminator = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        >>> group = OptimizerGroup([
        ...     (keras.optimizers.Adam(1e-4), generator.trainable_variables),
        ...     (keras.optimizers.Adam(4e-4), discriminator.trainable_variables)])
        >>> g_values, d_values = group.split([v.value for v in group.variables])
        >>> len(g_values) == len(group.optimizers[0].variables)
        True
    """

    built = True

    def __init__(self, pairs):
        self.optimizers, self._owner = [], {}
        for index, (optimizer, variables) in enumerate(pairs):
            variables = list(variables)
            if not optimizer.built:
                optimizer.build(variables)
            for variable in variables:
                if id(variable) in self._owner:
                    raise ValueError(f"Variable {variable.path!r} is given to two optimizers "
                                     "of the group. Received: the same variable twice")
                self._owner[id(variable)] = index
            self.optimizers.append(optimizer)
        if not self.optimizers:
            raise ValueError("OptimizerGroup needs at least one (optimizer, variables) pair. "
                             "Received: pairs=[]")

    @property
    def variables(self):
        """Every optimizer's variables, the first optimizer's first."""
        return [variable for optimizer in self.optimizers for variable in optimizer.variables]

    @property
    def iterations(self):
        """The first optimizer's step count."""
        return self.optimizers[0].iterations

    @property
    def learning_rate(self):
        """The first optimizer's learning rate."""
        return self.optimizers[0].learning_rate

    def build(self, variables):
        """A no-op: the optimizers are built on their own variables."""

    def split(self, values):
        """``values`` (one per variable of :attr:`variables`) as one list per optimizer."""
        values, parts, start = list(values), [], 0
        for optimizer in self.optimizers:
            count = len(optimizer.variables)
            parts.append(values[start:start + count])
            start += count
        if start != len(values):
            raise ValueError(f"Expected {start} optimizer values. Received: {len(values)}")
        return parts

    def _groups(self, grads, variables):
        groups = [([], [], []) for _ in self.optimizers]
        for position, (grad, variable) in enumerate(zip(grads, variables)):
            owner = self._owner.get(id(variable))
            if owner is None:
                raise ValueError(f"No optimizer of the group updates {variable.path!r}.")
            for part, item in zip(groups[owner], (position, grad, variable)):
                part.append(item)
        return groups

    def apply(self, grads, trainable_variables):
        """Apply each gradient with the optimizer of its variable."""
        for optimizer, (_, own_grads, own_variables) in zip(
                self.optimizers, self._groups(grads, trainable_variables)):
            if own_variables:
                optimizer.apply(own_grads, own_variables)

    def apply_gradients(self, grads_and_vars):
        grads, variables = zip(*grads_and_vars)
        return self.apply(list(grads), list(variables))

    def stateless_apply(self, optimizer_variables, grads, trainable_variables):
        """The stateless form of :meth:`apply` (each optimizer's ``stateless_apply``):
        ``trainable_variables`` are the values of every variable the optimizers were
        built on, in the order of their pairs. Returns ``(new trainable values, new
        optimizer values)``."""
        trainable_variables, grads = list(trainable_variables), list(grads)
        new_trainable, new_optimizer, start = [], [], 0
        for optimizer, values in zip(self.optimizers, self.split(optimizer_variables)):
            count = len(optimizer._trainable_variables)  # noqa: SLF001 - what it was built on
            updated, values = optimizer.stateless_apply(
                values, grads[start:start + count], trainable_variables[start:start + count])
            new_trainable += list(updated)
            new_optimizer += list(values)
            start += count
        return new_trainable, new_optimizer
