"""A fix of Keras' own that its releases do not carry yet, applied when ``kctx`` is imported.

**Keras' tree functions on PyTorch keep their arguments alive** (keras-team/keras#23110,
fixed on Keras' main branch by #23111; Keras 3.15.1 still has it). On the PyTorch backend
``keras.tree`` is ``keras.src.tree.torchtree_impl``, whose ``_dict_to_ordered_dict`` (run by
``flatten``, ``pack_sequence_as`` and ``traverse``) and ``traverse`` call
``torch.utils._pytree.tree_flatten(structure, is_leaf=lambda x: x is not structure)``.
``tree_flatten``'s recursive ``helper`` closes over itself and over that ``is_leaf``, and the
lambda closes over ``structure``: a reference cycle, so the structure and every tensor in
it (with its autograd graph) outlive the call until Python's cyclic collector runs. Every
Keras operation given a list of tensors (``ops.stack``, ``ops.concatenate``) and every
layer call flattens its arguments this way; the cycles that reach the collector's oldest
generation wait for a full collection, which a process of a million objects makes seldom.

What it cost: ``python -m language.train`` on PyTorch (the causal Hamburger's prefix sums
stack 63 slices of 2 MB a call) grew to the machine's 24 GB and was killed at about step 17.
``python tools/torch_host_memory.py`` takes the same model's training steps: while the
one-step gradient's rounds were still recorded, Keras as released held 5.0 GB after the
first step and 10.9 GB after the sixth (14.9 GB at the peak), with this fix 1.6–1.7 GB
(``results/torch_host_memory_rounds_recorded.json``); with the rounds unrecorded, 1.8 →
2.2 GB against 1.5–1.6 GB (``results/torch_host_memory.json``).

:func:`apply` replaces the two functions with versions whose ``is_leaf`` holds the
structure's ``id`` instead of the structure (as Keras' main branch does), only where the
backend is PyTorch and :func:`tree_keeps_structures_alive` finds the cycle: a Keras release
without it is left as it is, and so are the other backends (their ``keras.tree`` is optree's
C++ traversal, which makes no cycle). ``KCTX_NO_KERAS_FIXES=1`` in the environment leaves
Keras as it is (to measure it, or should the fix ever be wrong for a Keras release).
"""

import functools
import gc
import os
import weakref

import keras

_APPLIED = []


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
    the structure's id: the same traversal, results and order."""
    torch_tree = impl.torch_tree
    ordered_dict = impl._dict_to_ordered_dict

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


def apply():
    """Applies the fix where it is needed (see the module); returns the names of the Keras
    functions replaced, ``[]`` where none was. Idempotent.

    Example:

    >>> from kctx import _keras_fixes as keras_fixes
    >>> fixed = keras_fixes.apply()  # TensorFlow, JAX: []; PyTorch + Keras 3.15.1: the two
    >>> keras_fixes.tree_keeps_structures_alive()
    False
    """
    if _APPLIED or keras.backend.backend() != "torch" or os.environ.get("KCTX_NO_KERAS_FIXES"):
        return list(_APPLIED)
    from keras.src.tree import torchtree_impl as impl

    needed = ("torch_tree", "defaultdict", "_dict_to_ordered_dict", "traverse")
    if not all(hasattr(impl, name) for name in needed) or not tree_keeps_structures_alive():
        return []
    impl._dict_to_ordered_dict, impl.traverse = _patched(impl)
    if tree_keeps_structures_alive():  # another path makes the cycle: put Keras' back
        impl._dict_to_ordered_dict = impl._dict_to_ordered_dict.__wrapped__
        impl.traverse = impl.traverse.__wrapped__
        return []
    _APPLIED.extend(["keras.src.tree.torchtree_impl._dict_to_ordered_dict",
                     "keras.src.tree.torchtree_impl.traverse"])
    return list(_APPLIED)
