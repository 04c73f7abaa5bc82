"""Count the multiply-accumulates of a traced TensorFlow graph or JAX program.

Every matmul / convolution / einsum / small dense linear-algebra op in the
graph is counted from its static shapes, including ops inside nested function
calls. Element-wise ops are not MACs and are not counted (the convention of
the profilers the papers used: torchprofile, thop). On the JAX backend
:func:`count_macs` walks the function's jaxpr instead (:func:`count_jaxpr_macs`:
``dot_general`` and ``conv_general_dilated``, which every Keras matmul, einsum
and convolution lowers to), and gives the same counts for the same model; on
PyTorch it runs the function once on zeros under
``torch.utils.flop_counter.FlopCounterMode`` (:func:`count_torch_macs`: the
matrix products and convolutions, two FLOPs per MAC).
"""

import math
import warnings

import keras

from kctx.layers.depthwise import as_convolutions


def _dims(tensor):
    shape = tensor.shape
    if shape.rank is None or any(d is None for d in shape.as_list()):
        raise ValueError(
            f"MAC counting needs static shapes; tensor {tensor.name} has shape {shape}. "
            "Profile with a fully defined input shape (batch size included)."
        )
    return shape.as_list()


def _prod(values):
    return int(math.prod(values))


def _matmul(op):
    a = _dims(op.inputs[0])
    k = a[0] if op.get_attr("transpose_a") else a[1]
    return _prod(_dims(op.outputs[0])) * k


def _batch_matmul(op):
    x = _dims(op.inputs[0])
    k = x[-2] if op.get_attr("adj_x") else x[-1]
    return _prod(_dims(op.outputs[0])) * k


def _einsum(op):
    if len(op.inputs) < 2:
        return 0
    equation = op.get_attr("equation").decode().replace(" ", "")
    inputs, _ = equation.split("->")
    sizes = {}
    for labels, tensor in zip(inputs.split(","), op.inputs):
        dims = _dims(tensor)
        if "..." in labels:
            head, tail = labels.split("...")
            n_ellipsis = len(dims) - len(head) - len(tail)
            ellipsis = [f"@{i}" for i in range(n_ellipsis)]
            labels = list(head) + ellipsis + list(tail)
        for label, size in zip(labels, dims):
            sizes[label] = max(sizes.get(label, 1), size)
    return _prod(sizes.values())


def _conv(op):
    # Forward: output elements × (kernel spatial × input channels per group).
    kernel = _dims(op.inputs[1])
    return _prod(_dims(op.outputs[0])) * _prod(kernel[:-1])


def _depthwise(op):
    kernel = _dims(op.inputs[1])
    return _prod(_dims(op.outputs[0])) * _prod(kernel[:-2])


def _conv_backprop_input(op):
    # inputs: (input_sizes, filter, out_backprop): same MACs as the forward conv.
    kernel = _dims(op.inputs[1])
    return _prod(_dims(op.inputs[2])) * _prod(kernel[:-1])


def _conv_backprop_filter(op):
    # inputs: (input, filter_sizes, out_backprop); output is the filter gradient.
    kernel = _dims(op.outputs[0])
    return _prod(_dims(op.inputs[2])) * _prod(kernel[:-1])


def _depthwise_backprop_input(op):
    kernel = _dims(op.inputs[1])
    return _prod(_dims(op.inputs[2])) * _prod(kernel[:-2])


def _depthwise_backprop_filter(op):
    kernel = _dims(op.outputs[0])
    return _prod(_dims(op.inputs[2])) * _prod(kernel[:-2])


def _square_matrix(op, factor):
    dims = _dims(op.inputs[0])
    n = dims[-1]
    return _prod(dims[:-2]) * int(factor * n**3)


def _matrix_solve(op):
    a, b = _dims(op.inputs[0]), _dims(op.inputs[1])
    n, k = a[-1], b[-1]
    # LU factorisation (n³/3) + forward/back substitution (n²·k).
    return _prod(a[:-2]) * (n**3 // 3 + n * n * k)


MAC_RULES = {
    "MatMul": _matmul,
    "BatchMatMul": _batch_matmul,
    "BatchMatMulV2": _batch_matmul,
    "BatchMatMulV3": _batch_matmul,
    "Einsum": _einsum,
    "Conv2D": _conv,
    "Conv3D": _conv,
    "DepthwiseConv2dNative": _depthwise,
    "Conv2DBackpropInput": _conv_backprop_input,
    "Conv2DBackpropFilter": _conv_backprop_filter,
    "Conv3DBackpropInputV2": _conv_backprop_input,
    "Conv3DBackpropFilterV2": _conv_backprop_filter,
    "DepthwiseConv2dNativeBackpropInput": _depthwise_backprop_input,
    "DepthwiseConv2dNativeBackpropFilter": _depthwise_backprop_filter,
    # Dense factorisations: Gauss–Jordan inverse n³, Cholesky n³/3.
    "MatrixInverse": lambda op: _square_matrix(op, 1.0),
    "Cholesky": lambda op: _square_matrix(op, 1.0 / 3.0),
    "MatrixSolve": _matrix_solve,
}

_CALL_OPS = ("PartitionedCall", "StatefulPartitionedCall")


def _function_graph(graph, name):
    function = graph._get_function(name)  # noqa: SLF001 - TF has no public accessor
    if function is None:
        return None
    return getattr(function, "graph", None)


def _live_operations(graph):
    """The names of the ops a ``FuncGraph``'s outputs and control outputs depend on, or
    None for a graph without outputs (a plain ``tf.Graph``: every op counts).

    ``GradientTape.gradient`` builds each op's whole gradient function: a matmul's
    gradient with respect to an input that needs none (a ``stop_gradient``'s, a
    constant's) is in the graph but feeds nothing, and TensorFlow prunes it before
    running the function. Counting it put 2.3% more MACs in the training step of
    ``context_block("ham_nmf")`` at 16×16×32 than the step computes, and than JAX's and
    PyTorch's counts of the same step (tests/block_models.py's ``TRAIN_STEP_MACS``).
    """
    outputs = getattr(graph, "outputs", None)
    if outputs is None:
        return None
    live = set()
    stack = [tensor.op for tensor in outputs] + list(getattr(graph, "control_outputs", ()))
    while stack:
        op = stack.pop()
        if op.name in live:
            continue
        live.add(op.name)
        stack.extend(tensor.op for tensor in op.inputs)
        stack.extend(op.control_inputs)
    return live


def count_graph_macs(graph, by_op=None):
    """MACs of the counted ops in ``graph`` (a ``tf.Graph`` / ``FuncGraph``) that its
    outputs depend on (the ops TensorFlow runs; see :func:`_live_operations`).

    Args:
        graph: the graph to walk; nested function calls are followed.
        by_op: optional dict, filled with MACs per op type.

    Example:
        >>> import tensorflow as tf
        >>> w = tf.Variable(tf.ones((8, 4)))
        >>> def step(x):  # the forward product and the gradient of x, 16·8·4 MACs each
        ...     with tf.GradientTape() as tape:
        ...         tape.watch(x)
        ...         y = tf.reduce_sum(tf.einsum("nk,km->nm", x, tf.stop_gradient(w)))
        ...     return y, tape.gradient(y, x)
        >>> graph = tf.function(step).get_concrete_function(tf.TensorSpec((16, 8))).graph
        >>> by_op = {}
        >>> count_graph_macs(graph, by_op), by_op  # (not the einsum built for w's gradient)
        (1024, {'Einsum': 1024})
    """
    total = 0
    live = _live_operations(graph)
    for op in graph.get_operations():
        if live is not None and op.name not in live:
            continue
        rule = MAC_RULES.get(op.type)
        if rule is not None:
            macs = rule(op)
            total += macs
            if by_op is not None:
                by_op[op.type] = by_op.get(op.type, 0) + macs
        elif op.type in _CALL_OPS:
            inner = _function_graph(graph, op.get_attr("f").name)
            if inner is not None:
                total += count_graph_macs(inner, by_op)
        elif op.type in ("While", "StatelessWhile", "If", "StatelessIf"):
            warnings.warn(
                f"{op.type} op {op.name!r}: its branches/body are not counted; "
                "unroll Python loops for exact MAC counts.",
                stacklevel=2,
            )
    return total


def count_macs(function, *input_specs, by_op=None):
    """MACs of ``function`` traced at ``input_specs`` (``tf.TensorSpec``s or shapes).

    On the TensorFlow backend the function is traced by ``tf.function``
    (:func:`count_graph_macs`); on JAX by ``jax.make_jaxpr``, on float32 zeros of
    the given shapes (:func:`count_jaxpr_macs`); on PyTorch it runs once on
    those zeros (:func:`count_torch_macs`). ``TapDepthwiseConv2D`` layers are traced as
    their convolution (``kctx.layers.depthwise.as_convolutions``), whose MACs these count.

    Examples:
        >>> count_macs(lambda x: keras.ops.matmul(x, x), (64, 64))
        262144
    """
    with as_convolutions():
        return _traced_macs(function, input_specs, by_op)


def _traced_macs(function, input_specs, by_op):
    backend = keras.backend.backend()
    if backend in ("jax", "torch"):
        import numpy as np

        arrays = [np.zeros(tuple(spec.shape) if hasattr(spec, "shape") else spec,
                           np.dtype(getattr(getattr(spec, "dtype", None), "name", "float32")))
                  for spec in input_specs]
        if backend == "torch":
            return count_torch_macs(function, *arrays, by_op=by_op)
        import jax

        return count_jaxpr_macs(jax.make_jaxpr(function)(*arrays), by_op)
    import tensorflow as tf

    specs = [
        spec if isinstance(spec, tf.TensorSpec) else tf.TensorSpec(spec, tf.float32)
        for spec in input_specs
    ]
    concrete = tf.function(function, autograph=False).get_concrete_function(*specs)
    return count_graph_macs(concrete.graph, by_op)



def _dot_general(equation):
    (lhs_contract, _), (lhs_batch, _) = equation.params["dimension_numbers"]
    lhs = equation.invars[0].aval.shape
    del lhs_batch  # batch dimensions are part of the output
    return _prod(equation.outvars[0].aval.shape) * _prod(lhs[d] for d in lhs_contract)


def _conv_general_dilated(equation):
    # Output elements × (kernel spatial × input channels per group); the kernel's
    # layout is rhs_spec = (out features, in features per group, spatial...). A transposed
    # convolution (an input dilated by a strided convolution's gradient) counts its
    # products with the input's elements, not with the zeros between them: input elements
    # × kernel spatial × output features per group, as TensorFlow's Conv2DBackpropInput.
    params = equation.params
    rhs_spec = params["dimension_numbers"].rhs_spec
    kernel = equation.invars[1].aval.shape
    spatial = _prod(kernel[d] for d in rhs_spec[2:])
    if any(d > 1 for d in params.get("lhs_dilation") or ()):
        groups = params["feature_group_count"] * params["batch_group_count"]
        return _prod(equation.invars[0].aval.shape) * spatial * kernel[rhs_spec[0]] // groups
    return _prod(equation.outvars[0].aval.shape) * kernel[rhs_spec[1]] * spatial


JAX_MAC_RULES = {"dot_general": _dot_general, "conv_general_dilated": _conv_general_dilated}


def _sub_jaxprs(equation):
    for value in equation.params.values():
        for item in (value if isinstance(value, (list, tuple)) else (value,)):
            inner = getattr(item, "jaxpr", None)  # a ClosedJaxpr, or a Jaxpr itself
            if inner is not None or hasattr(item, "eqns"):
                yield item


def count_jaxpr_macs(jaxpr, by_op=None):
    """MACs of every ``dot_general`` / ``conv_general_dilated`` in a jaxpr (a
    ``ClosedJaxpr`` or ``Jaxpr``), following nested calls (``pjit``, custom
    derivatives, ``remat``).

    Args:
        jaxpr: from ``jax.make_jaxpr(function)(*arguments)``.
        by_op: optional dict, filled with MACs per primitive.

    Examples:
        >>> import jax
        >>> import numpy as np
        >>> x = np.zeros((64, 64), "float32")
        >>> count_jaxpr_macs(jax.make_jaxpr(lambda a: a @ a)(x))
        262144
    """
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    total = 0
    for equation in jaxpr.eqns:
        name = equation.primitive.name
        rule = JAX_MAC_RULES.get(name)
        if rule is not None:
            macs = rule(equation)
            total += macs
            if by_op is not None:
                by_op[name] = by_op.get(name, 0) + macs
        elif name in ("while", "cond", "scan"):
            warnings.warn(f"{name}: its body is not counted; unroll Python loops for "
                          "exact MAC counts.", stacklevel=2)
        else:
            for inner in _sub_jaxprs(equation):
                total += count_jaxpr_macs(inner, by_op)
    return total


def _torch_flop_counter():
    """``torch.utils.flop_counter.FlopCounterMode`` (not displayed) whose convolutions'
    gradients count what the forward convolution counts, each: PyTorch's own formula
    counts a grouped convolution's kernel gradient as if its groups were one (a
    depthwise kernel's C× too many), where TensorFlow's and JAX's counts do not."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode, conv_flop_count

    def convolution_backward(grad_out_shape, x_shape, w_shape, _bias, _stride, _padding,
                             _dilation, transposed, _output_padding, _groups, output_mask,
                             out_shape=None, **kwargs):
        forward = conv_flop_count(x_shape, w_shape, grad_out_shape, transposed)
        return forward * (bool(output_mask[0]) + bool(output_mask[1]))

    return FlopCounterMode(display=False, custom_mapping={
        torch.ops.aten.convolution_backward: convolution_backward})


def count_torch_macs(function, *arrays, by_op=None):
    """MACs of ``function`` run once on ``arrays`` on the PyTorch backend: its matrix
    products and convolutions (``mm``, ``addmm``, ``bmm``, ``baddbmm``, ``convolution``,
    attention kernels), as ``torch.utils.flop_counter.FlopCounterMode`` counts them at
    two FLOPs per MAC, which every Keras matmul, einsum and convolution dispatches to.

    Args:
        function: called with ``arrays`` converted to tensors (without gradients).
        *arrays: the inputs (NumPy arrays of the shapes to count at).
        by_op: optional dict, filled with MACs per ATen op.

    Returns:
        The MACs, an int (``count_macs(lambda a: keras.ops.matmul(a, a), (64, 64))`` is
        262144 on every backend).
    """
    import torch

    tensors = [keras.ops.convert_to_tensor(array) for array in arrays]
    with torch.no_grad(), _torch_flop_counter() as counter:
        function(*tensors)
    if by_op is not None:
        for op, flops in counter.get_flop_counts().get("Global", {}).items():
            name = getattr(op, "__name__", str(op))
            by_op[name] = by_op.get(name, 0) + flops // 2
    return counter.get_total_flops() // 2
