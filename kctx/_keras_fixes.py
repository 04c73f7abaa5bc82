"""Fixes of Keras' that its releases do not carry yet, applied when ``kctx`` is imported.

All three are on the PyTorch backend; the first two are on Keras' main branch, the third in
a pull request to it. :func:`apply` makes each only where a check finds the released
behaviour, so a Keras release with the fix is left as it is, and so are the other backends.
``KCTX_NO_KERAS_FIXES=1`` in the environment leaves Keras as it is (to measure it, or should
a fix ever be wrong for a Keras release); ``KCTX_NO_KERAS_FIXES=conv`` (or ``tree``,
``pool``, several comma-separated) leaves those alone.

**Keras' tree functions on PyTorch keep their arguments alive** (``tree``;
keras-team/keras#23110, fixed on Keras' main branch by #23111; Keras 3.15.1 still has it).
On the PyTorch backend ``keras.tree`` is ``keras.src.tree.torchtree_impl``, whose
``_dict_to_ordered_dict`` (run by ``flatten``, ``pack_sequence_as`` and ``traverse``) and
``traverse`` call ``torch.utils._pytree.tree_flatten(structure, is_leaf=lambda x: x is not
structure)``. ``tree_flatten``'s recursive ``helper`` closes over itself and over that
``is_leaf``, and the lambda closes over ``structure``: a reference cycle, so the structure
and every tensor in it (with its autograd graph) outlive the call until Python's cyclic
collector runs. Every Keras operation given a list of tensors (``ops.stack``,
``ops.concatenate``) and every layer call flattens its arguments this way; the cycles that
reach the collector's oldest generation wait for a full collection, which a process of a
million objects makes seldom.

What it cost: ``python -m language.train`` on PyTorch (the causal Hamburger's prefix sums
stack 63 slices of 2 MB a call) grew to the machine's 24 GB and was killed at about step 17.
``python tools/torch_host_memory.py`` takes the same model's training steps: while the
one-step gradient's rounds were still recorded, Keras as released held 5.0 GB after the
first step and 10.9 GB after the sixth (14.9 GB at the peak), with this fix 1.6–1.7 GB
(``results/torch_host_memory_rounds_recorded.json``); with the rounds unrecorded, 1.8 →
2.2 GB against 1.5–1.6 GB (``results/torch_host_memory.json``). The fix replaces the two
functions with versions whose ``is_leaf`` holds the structure's ``id`` instead of the
structure (as Keras' main branch does), where :func:`tree_keeps_structures_alive` finds the
cycle. (The other backends' ``keras.tree`` is optree's C++ traversal, which makes no cycle.)
The replacement ``_dict_to_ordered_dict`` also returns a leaf as it is (Keras' main branch
does too, #23201) and rebuilds a plain list or tuple from its items, where Keras 3.15.1
flattens and unflattens each through ``torch.utils._pytree``'s Python: SegNeXt-T's eager call
at 64×64 (374 layer calls) 103.0–108.0 → 89.9–92.4 ms on 2 CPU cores, 109.3–109.9 ms with
Keras' own functions (``bash results/keras_tree_fix_cpu/run.sh``). While ``torch.compile``
traces (Keras' ``jit_compile=True`` on PyTorch) it takes Keras' path instead: with the short
cut dynamo traced SegNeXt-T's training step in larger graphs, and Inductor (PyTorch 2.13)
failed on one of their symbolic shapes ("cannot determine truth value of Relational"), where
Keras' own traversal trains (``KERAS_BACKEND=torch python -m segmentation.bench --train-step
--crop-size 64 --jit-compile``).

**Keras' PyTorch convolution copies its input twice** (``conv``; keras-team/keras#23279,
fixed on Keras' main branch by #23199; Keras 3.15.1 still has it). Given a channels-last
(B, H, W, C) input (Keras' default), ``keras.src.backend.torch.nn.conv`` computes
``x.permute(0, 3, 1, 2).contiguous()``, a copy into channels-first memory, and then
``.contiguous(memory_format=torch.channels_last)``, a copy back, before ``conv2d``; the
permuted view is channels-last memory already. Every convolution of every Keras model on
PyTorch (depthwise and separable ones too) pays both copies, forward and backward. The fix
gives Keras' own ``conv`` that view as its channels-first input, with the filter laid out as
Keras' channels-last path lays it out, and permutes the output back: PyTorch runs the same
convolution on the same memory. It is made where :func:`conv_input_copies` counts a copy.
What it gives (``bash results/keras_conv_fix_cpu/run.sh``, Keras as released against fixed,
each measurement a process of its own, 2 CPU cores): SegNeXt-T's eager call at 512×512
587–595 → 343–383 ms, its training step (batch 2 of 128² crops) 365.5 → 334.1 ms (median of
five runs each), the HamGAN's 128² training step 6.85–6.95 → 6.24–6.48 s
(``docs/workflows/backends.md``).

**Keras' PyTorch pooling copies its input too** (``pool``; keras-team/keras#23649, Keras'
pull request #23645 not merged yet). ``max_pool``, ``average_pool``, ``adaptive_max_pool``
and ``adaptive_average_pool`` of ``keras.src.backend.torch.nn`` permute a channels-last
input to channels-first and call ``.contiguous()``, a copy into channels-first memory, and
return the channels-last view of channels-first memory, which the operations after it copy
again or compute on in channels-first layout. PyTorch's pooling takes
channels-last memory, and its 2-D kernels (and 3-D max pooling) write their output in it: the
fix gives Keras' own function the channels-first view and permutes the output back, a
contiguous channels-last tensor; 1-D and channels-first inputs take Keras' path. It is made
for each function where :func:`pool_input_copies` counts a copy. What it gives (``bash
results/keras_pool_fix_cpu/run.sh``, as the convolution's above): the FID Inception
extractor's features of 299×299 images (13 poolings a call) 103–107 → 83–86 ms an image,
KANet_KV's 224×224 call at batch 8 185–189 → 164–165 ms.
"""

import functools
import gc
import inspect
import os
import weakref

import keras

_APPLIED = {}  # the fixes made: their names (FIXES) -> the Keras functions they replaced


class _Leaf:
    """An object a pytree holds as a leaf, and a weak reference can follow."""


def tree_keeps_structures_alive():
    """Whether ``keras.tree.flatten`` leaves its argument in a reference cycle: a list
    of two leaves is flattened with the cyclic collector off, and a leaf outlives the last
    reference to it. (With one leaf, Keras 3.15.1's cycle happens not to hold it.)

    Example:

    >>> tree_keeps_structures_alive()  # after ``import kctx``, on every backend
    False
    """
    leaf = _Leaf()
    alive = weakref.ref(leaf)
    collecting = gc.isenabled()
    gc.disable()
    try:
        keras.tree.flatten([leaf, _Leaf()])
        del leaf
        return alive() is not None
    finally:
        if collecting:
            gc.enable()


def _not_the_structure(structure_id, x):
    return id(x) != structure_id


def _patched(impl):
    """``impl``'s ``_dict_to_ordered_dict`` and ``traverse`` with an ``is_leaf`` that holds
    the structure's id: the same traversal, results and order.

    ``_dict_to_ordered_dict`` (run by every ``flatten`` and ``pack_sequence_as``, several
    times a layer call) also returns a leaf as it is and rebuilds a plain list or tuple from
    its items without a pytree round trip, where Keras 3.15.1 flattens and unflattens each
    (a leaf's short cut is Keras' own on its main branch, #23201): the same objects,
    containers and order, at a fraction of the Python work; not while ``torch.compile``
    traces (see the module)."""
    import torch

    torch_tree = impl.torch_tree
    ordered_dict = impl._dict_to_ordered_dict
    supported_nodes = torch_tree.SUPPORTED_NODES
    node_type = torch_tree._get_node_type
    compiling = torch.compiler.is_compiling  # torch.compile's and torch.export's tracing

    def children(structure):
        return torch_tree.tree_flatten(
            structure, is_leaf=functools.partial(_not_the_structure, id(structure)))

    def sorted_mapping(x):
        if type(x) is dict:
            return {k: x[k] for k in sorted(x.keys())}
        if type(x) is impl.defaultdict:
            return impl.defaultdict(x.default_factory, {k: x[k] for k in sorted(x.keys())})
        return None

    def dict_to_ordered_dict(structure):
        if not compiling():
            kind = type(structure)
            if kind is list:  # pytree's list node: its items, unflattened into a new list
                return [dict_to_ordered_dict(item) for item in structure]
            if kind is tuple:
                return tuple([dict_to_ordered_dict(item) for item in structure])
            if node_type(structure) not in supported_nodes:  # a leaf: Keras' own test
                return structure
        ordered = sorted_mapping(structure)
        if ordered is not None:
            return ordered
        leaves, treedef = children(structure)
        if treedef.num_nodes == 1 and treedef.num_leaves == 1:
            return structure
        return torch_tree.tree_unflatten([dict_to_ordered_dict(c) for c in leaves], treedef)

    def traverse(func, structure, top_down=True):
        def traverse_children():
            leaves, treedef = children(structure)
            if treedef.num_nodes == 1 and treedef.num_leaves == 1:
                return structure
            return torch_tree.tree_unflatten(
                [traverse(func, c, top_down=top_down) for c in leaves], treedef)

        structure = dict_to_ordered_dict(structure)
        if top_down:
            result = func(structure)
            if result is None:
                return traverse_children()
        else:
            traversed = traverse_children()
            result = func(traversed)
            if result is None:
                return traversed
        if isinstance(result, type) and result.__name__ == "MAP_TO_NONE":
            return None
        return result

    dict_to_ordered_dict.__wrapped__ = ordered_dict
    traverse.__wrapped__ = impl.traverse
    return dict_to_ordered_dict, traverse


def _input_copies(call):
    """The ATen copies of a (1, 5, 6, 3) input's size (90 elements) that ``call(inputs)``
    dispatches, on PyTorch's ``meta`` device (nothing is computed)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    aten = torch.ops.aten
    copies = []

    class CountCopies(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            outputs = func(*args, **(kwargs or {}))
            if (func.overloadpacket in (aten.clone, aten.copy_, aten._to_copy)
                    and isinstance(outputs, torch.Tensor) and outputs.numel() == 90):
                copies.append(func)
            return outputs

    with keras.device("meta"):
        inputs = torch.zeros(1, 5, 6, 3, device="meta")
        with CountCopies():
            call(inputs)
    return len(copies)


def conv_input_copies():
    """How many copies of a channels-last (B, H, W, C) input Keras' PyTorch convolution
    makes before convolving it: the ATen copies of the input's size that
    ``keras.src.backend.torch.nn.conv`` dispatches for a (1, 5, 6, 3) input, counted on
    PyTorch's ``meta`` device (nothing is computed). 0 on the other backends.

    Example:

    >>> conv_input_copies()  # after ``import kctx``, on every backend
    0
    """
    if keras.backend.backend() != "torch":
        return 0
    import torch
    from keras.src.backend.torch import nn

    kernel = torch.zeros(2, 2, 3, 4, device="meta")
    return _input_copies(lambda inputs: nn.conv(inputs, kernel, data_format="channels_last"))


POOLS = {  # Keras' PyTorch pooling functions -> their arguments after the input, for the count
    "max_pool": (2,), "average_pool": (2,),
    "adaptive_max_pool": (2,), "adaptive_average_pool": (2,)}


def pool_input_copies(name=None):
    """How many copies of a channels-last (B, H, W, C) input Keras' PyTorch pooling makes
    before pooling it: the ATen copies of the input's size that
    ``keras.src.backend.torch.nn.<name>`` dispatches for a (1, 5, 6, 3) input, counted on
    PyTorch's ``meta`` device; ``name=None``: the sum over the pooling functions of
    :data:`POOLS` that the installed Keras has. 0 on the other backends.

    Example:

    >>> pool_input_copies()  # after ``import kctx``, on every backend
    0
    """
    if keras.backend.backend() != "torch":
        return 0
    from keras.src.backend.torch import nn

    names = [name] if name is not None else [n for n in POOLS if callable(getattr(nn, n, None))]
    return sum(_input_copies(lambda inputs, n=n: getattr(nn, n)(
        inputs, *POOLS[n], data_format="channels_last")) for n in names)


def _conv_on_the_channels_first_view(conv):
    """Keras' PyTorch ``conv``, given a channels-last input of 2 or 3 spatial axes as the
    channels-first view of it (no copy: the view is channels-last memory, as PyTorch's
    convolutions take it) and returning the channels-last view of its output; PyTorch
    receives the same input and filter memory as from Keras' channels-last path."""
    import torch
    from keras.src.backend.config import standardize_data_format
    from keras.src.backend.torch.core import convert_to_tensor

    def fixed(inputs, kernel, strides=1, padding="valid", data_format=None, dilation_rate=1):
        inputs = convert_to_tensor(inputs)
        rank = inputs.ndim
        if standardize_data_format(data_format) != "channels_last" or rank not in (4, 5):
            return conv(inputs, kernel, strides, padding, data_format, dilation_rate)
        # Keras' channels-last path gives PyTorch a channels-last filter too (one copy of the
        # filter): the same copy, laid out so that Keras' (out, in, *spatial) view of the
        # (*spatial, in, out) filter is channels-last memory.
        kernel = torch.permute(
            torch.permute(convert_to_tensor(kernel), (rank - 1, *range(rank - 1))).contiguous(),
            (*range(1, rank), 0))
        outputs = conv(torch.permute(inputs, (0, rank - 1, *range(1, rank - 1))), kernel,
                       strides, padding, "channels_first", dilation_rate)
        return torch.permute(outputs, (0, *range(2, rank), 1))

    fixed.__wrapped__ = conv
    return fixed


def _pool_on_the_channels_first_view(pool):
    """Keras' PyTorch pooling function ``pool``, given a channels-last input of 2 or 3
    spatial axes as the channels-first view of it (no copy: PyTorch's pooling takes
    channels-last memory, and its 2-D kernels write their output so) and returning the
    channels-last view of its output. The other arguments pass as given."""
    import torch
    from keras.src.backend.config import standardize_data_format
    from keras.src.backend.torch.core import convert_to_tensor

    at = list(inspect.signature(pool).parameters).index("data_format") - 1  # after inputs

    @functools.wraps(pool)
    def fixed(inputs, *args, **kwargs):
        inputs = convert_to_tensor(inputs)
        rank = inputs.ndim
        positional = len(args) > at
        data_format = args[at] if positional else kwargs.get("data_format")
        if standardize_data_format(data_format) != "channels_last" or rank not in (4, 5):
            return pool(inputs, *args, **kwargs)
        if positional:
            args = (*args[:at], "channels_first", *args[at + 1:])
        else:
            kwargs = {**kwargs, "data_format": "channels_first"}
        outputs = pool(torch.permute(inputs, (0, rank - 1, *range(1, rank - 1))), *args,
                       **kwargs)
        return torch.permute(outputs, (0, *range(2, rank), 1))

    return fixed


FIXES = ("tree", "conv", "pool")


def _left_alone():
    """The fixes ``KCTX_NO_KERAS_FIXES`` names (``1``: all of them; unset or ``0``: none)."""
    value = os.environ.get("KCTX_NO_KERAS_FIXES", "").strip()
    if value.lower() in ("", "0", "false", "no"):
        return set()
    if value.lower() in ("1", "true", "yes", "all"):
        return set(FIXES)
    names = {name.strip() for name in value.split(",")}
    if not names <= set(FIXES):
        raise ValueError(f"KCTX_NO_KERAS_FIXES takes 1 (all), 0 (none) or some of "
                         f"{', '.join(FIXES)}, comma-separated. "
                         f"Received: KCTX_NO_KERAS_FIXES={value!r}")
    return names


def _apply_tree():
    from keras.src.tree import torchtree_impl as impl

    needed = ("torch_tree", "defaultdict", "_dict_to_ordered_dict", "traverse")
    if not all(hasattr(impl, name) for name in needed) or not tree_keeps_structures_alive():
        return []
    impl._dict_to_ordered_dict, impl.traverse = _patched(impl)
    if tree_keeps_structures_alive():  # another path makes the cycle: put Keras' back
        impl._dict_to_ordered_dict = impl._dict_to_ordered_dict.__wrapped__
        impl.traverse = impl.traverse.__wrapped__
        return []
    return ["keras.src.tree.torchtree_impl._dict_to_ordered_dict",
            "keras.src.tree.torchtree_impl.traverse"]


def _apply_conv():
    from keras.src.backend.torch import nn

    keras_conv = getattr(nn, "conv", None)
    try:  # a Keras whose convolution the check cannot run is left as it is
        if not callable(keras_conv) or not conv_input_copies():
            return []
        nn.conv = _conv_on_the_channels_first_view(keras_conv)
        if not conv_input_copies():
            return ["keras.src.backend.torch.nn.conv"]
    except Exception:
        pass
    nn.conv = keras_conv  # (or copied elsewhere than in its channels-last path)
    return []


def _apply_pool():
    from keras.src.backend.torch import nn

    replaced = []
    for name in POOLS:
        keras_pool = getattr(nn, name, None)
        if not callable(keras_pool):
            continue
        try:  # each pooling function apart; one the check cannot run is left as it is
            if not pool_input_copies(name):
                continue
            setattr(nn, name, _pool_on_the_channels_first_view(keras_pool))
            if not pool_input_copies(name):
                replaced.append(f"keras.src.backend.torch.nn.{name}")
                continue
        except Exception:
            pass
        setattr(nn, name, keras_pool)
    return replaced


def apply():
    """Applies the fixes where they are needed (see the module); returns the names of the
    Keras functions replaced, ``[]`` where none was. Idempotent.

    Example:

    >>> from kctx import _keras_fixes as keras_fixes
    >>> fixed = keras_fixes.apply()  # TensorFlow, JAX: []; PyTorch + Keras 3.15.1: seven
    >>> (keras_fixes.tree_keeps_structures_alive(), keras_fixes.conv_input_copies(),
    ...  keras_fixes.pool_input_copies())
    (False, 0, 0)
    """
    if keras.backend.backend() != "torch":
        return []
    left_alone = _left_alone()
    for name, fix in (("tree", _apply_tree), ("conv", _apply_conv),
                      ("pool", _apply_pool)):  # FIXES, in order
        if name not in left_alone and name not in _APPLIED:
            replaced = fix()
            if replaced:
                _APPLIED[name] = replaced
    return [function for replaced in _APPLIED.values() for function in replaced]
