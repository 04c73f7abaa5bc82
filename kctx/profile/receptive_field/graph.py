"""Finding a layer in a functional Keras model and its nested functional models.

Both receptive fields start here: :func:`locate` turns a layer name or a path
(``"backbone/res5_block0_out"``) into the chain of (nested) models that leads to it, and
:func:`call_node` / :func:`target_tensor` give the tensors the walk and the gradients
start from and stop at.
"""

import keras
from keras.src.models.functional import Functional

__all__ = ["call_node", "graph_of", "locate", "path_name", "static_size", "target_tensor"]


def graph_of(layer):
    """The functional graph of a functional or built Sequential model, else None."""
    if isinstance(layer, Functional):
        return layer
    if isinstance(layer, keras.Sequential):
        graph = getattr(layer, "_functional", None)
        if graph is None:
            raise ValueError(f"Sequential model {layer.name!r} is not built: build it on an "
                             "Input first.")
        return graph
    return None


def static_size(tensor):
    """(height, width) of a (B, H, W, C) tensor's static shape (entries None when
    unknown), or None for another rank."""
    shape = tuple(tensor.shape)
    if len(shape) != 4:
        return None
    return (shape[1], shape[2])


def _node_key(layer, index):
    return f"{id(layer)}_ib-{index}"


def call_node(graph, layer):
    """The node of ``layer`` inside ``graph`` (its single call there)."""
    nodes = [node for index, node in enumerate(layer._inbound_nodes)
             if _node_key(layer, index) in graph._nodes]
    if len(nodes) != 1:
        raise ValueError(f"Layer {layer.name!r} is called {len(nodes)} times in "
                         f"{graph.name!r}: the receptive field needs a layer called once.")
    return nodes[0]


def _find(model, name):
    """All (path of models, layer) whose layer is called ``name``, searched recursively."""
    found = []
    for layer in model.layers:
        if layer.name == name:
            found.append(([model], layer))
        inner = graph_of(layer)
        if inner is not None:
            found += [([model] + path, hit) for path, hit in _find(layer, name)]
    return found


def locate(model, layer_name):
    """``(models, layer)``: the chain of (nested) models from ``model`` to the one holding
    ``layer_name`` (a name searched recursively, or a path ``"backbone/norm4"``); layer
    None for ``layer_name`` None (the model's output)."""
    if graph_of(model) is None:
        raise ValueError(f"{model.name!r} is not a functional model: the receptive field is "
                         "read from the layer graph.")
    if layer_name is None:
        return [model], None
    if "/" in layer_name:
        path, current = [model], model
        parts = layer_name.split("/")
        for index, part in enumerate(parts):
            try:
                layer = current.get_layer(part)
            except ValueError:
                raise ValueError(f"No layer {part!r} in {current.name!r} (looking for "
                                 f"{layer_name!r}).") from None
            if index == len(parts) - 1:
                return path, layer
            if graph_of(layer) is None:
                raise ValueError(f"{part!r} in {layer_name!r} is not a functional model.")
            path.append(layer)
            current = layer
    found = _find(model, layer_name)
    if not found:
        raise ValueError(f"No layer named {layer_name!r} in {model.name!r} or its nested "
                         "models.")
    if len(found) > 1:
        paths = ["/".join(m.name for m in path[1:]) + ("/" if len(path) > 1 else "") +
                 layer_name for path, _ in found]
        raise ValueError(f"Several layers are named {layer_name!r}: {paths}; pass a path.")
    return found[0]


def target_tensor(models, layer):
    """The output tensor (the last, for several) of ``layer`` in the innermost model."""
    graph = graph_of(models[-1])
    if layer is None:
        return graph.outputs[-1]
    return call_node(graph, layer).outputs[-1]


def path_name(models, layer):
    """The name results report: ``"backbone/norm4"`` inside a nested model."""
    names = [m.name for m in models[1:]]
    if layer is None:
        return "/".join(names) or models[0].name
    return "/".join(names + [layer.name])
