"""Workflow configs: frozen dataclasses whose fields are also the command line's flags.

A workflow's config class documents every field in an ``Attributes:``
section of its docstring; :func:`add_config_arguments` turns each field into
a ``--field-name`` flag with that text as its help (fields every workflow
has, such as ``steps`` or ``batch_size``, take theirs from
:data:`SHARED_HELP`, so they read the same in every workflow). Named configs
are presets: ``--config NAME`` picks one and any flag overrides a field.
"""

import argparse
import ast
import dataclasses
import json
import math
import re
import types
import typing

# Help text of the fields several workflows share: one meaning, one text.
SHARED_HELP = {
    "steps": "training steps, i.e. optimizer updates (one global batch each)",
    "batch_size": "global batch size, split evenly over the replicas",
    "learning_rate": "initial learning rate",
    "checkpoint_every": "steps between checkpoints; a rerun resumes from the newest",
    "eval_every": "steps between held-out evaluations during training (0: only at the end)",
    "context": "context block: a kctx.layers.context_block name",
    "momentum": "SGD momentum",
    "weight_decay": "decoupled weight decay (SGD: on kernels, not on biases or normalisation; "
                    "AdamW: on the weights its parameter-wise options leave it on)",
    "train_split": "the dataset split trained on",
    "eval_split": "the held-out split scored at the end",
    "dataset": "dataset name (embedded, local directory or TFDS)",
    "num_classes": "classes of the dataset",
    "dtype_policy": "Keras dtype policy of the model: float32, or mixed_bfloat16 (bfloat16 "
                    "compute, float32 weights and optimizer state; the TPU's native format). The "
                    "losses and the context blocks' decompositions stay in float32",
}

# The model dtype policies a run may train with (``dtype_policy``). mixed_float16 is left out:
# it needs loss scaling, which ``compile`` adds but the GAN's hand-written step would not.
DTYPE_POLICIES = ("float32", "mixed_bfloat16")


def field_help(config_class):
    """``{field: help}``: :data:`SHARED_HELP` plus the ``Attributes:`` section of the
    class docstring (``name: text`` lines, continuation lines indented deeper)."""
    helps, current, indent = {}, None, None
    lines = (config_class.__doc__ or "").splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == "Attributes:")
    except StopIteration:
        start = len(lines)
    for line in lines[start + 1:]:
        if not line.strip():
            continue
        depth = len(line) - len(line.lstrip())
        if indent is None:
            indent = depth
        if depth < indent:
            break
        match = re.match(r"(\w+): (.*)", line.strip())
        if depth == indent and match:
            current = match.group(1)
            helps[current] = match.group(2)
        elif current:
            helps[current] += " " + line.strip()
    helps.update({name: text for name, text in SHARED_HELP.items()
                  if name in {f.name for f in dataclasses.fields(config_class)}})
    return helps


def _field_type(config_class, field):
    """(base type, optional) of a field: ``int | None`` → (int, True)."""
    hint = typing.get_type_hints(config_class).get(field.name, str)
    optional = field.default is None
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        optional = optional or len(args) < len(typing.get_args(hint))
        hint = args[0] if args else str
    if typing.get_origin(hint) in (tuple, dict):
        hint = typing.get_origin(hint)
    return hint, optional


def _parser_for(name, base, optional):
    def parse(text):
        if optional and text.lower() == "none":
            return None
        if base is dict:
            try:  # JSON, or a Python literal
                value = json.loads(text)
            except ValueError:
                try:
                    value = ast.literal_eval(text)
                except (ValueError, SyntaxError):
                    value = None
            if not isinstance(value, dict):
                raise argparse.ArgumentTypeError(
                    f"--{name.replace('_', '-')} takes a dict, e.g. "
                    f"'{{\"rank\": 16, \"steps\": 3}}'. Received: {text!r}")
            return value
        if base is tuple:
            try:
                value = ast.literal_eval(text)
            except (ValueError, SyntaxError):
                raise argparse.ArgumentTypeError(
                    f"--{name.replace('_', '-')} takes a comma-separated list, e.g. 1,2,3. "
                    f"Received: {text!r}") from None
            return as_tuple(value if isinstance(value, (tuple, list)) else (value,))
        try:
            return base(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"--{name.replace('_', '-')} takes {'an integer' if base is int else 'a number'}"
                f"{' or none' if optional else ''}. Received: {text!r}") from None

    parse.__name__ = base.__name__
    return parse


def add_config_arguments(parser, config_class, fields=None, title="config fields"):
    """One ``--field-name`` flag per field of ``config_class`` (or of ``fields``).

    Flags default to "not given" (``argparse.SUPPRESS``), so the parsed
    namespace holds exactly the overrides; :func:`config_overrides` collects
    them. Booleans get ``--name`` / ``--no-name``.
    """
    helps = field_help(config_class)
    group = parser.add_argument_group(
        title, "each overrides the chosen --config's value (shown in brackets)")
    for field in dataclasses.fields(config_class):
        if field.name == "name" or (fields is not None and field.name not in fields):
            continue
        flag = "--" + field.name.replace("_", "-")
        base, optional = _field_type(config_class, field)
        text = helps.get(field.name, "")
        if base is bool:
            group.add_argument(flag, action=argparse.BooleanOptionalAction,
                               default=argparse.SUPPRESS, help=text)
        else:
            group.add_argument(flag, type=_parser_for(field.name, base, optional),
                               default=argparse.SUPPRESS, metavar=base.__name__.upper(),
                               help=text + (" (none allowed)" if optional else ""))
    return group


def config_overrides(namespace, config_class):
    """The fields of ``config_class`` given on the command line, as a dict."""
    names = {field.name for field in dataclasses.fields(config_class)}
    return {key: value for key, value in vars(namespace).items() if key in names}


def as_tuple(value):
    """Lists (from JSON or the command line) to tuples, recursively."""
    if isinstance(value, (list, tuple)):
        return tuple(as_tuple(item) for item in value)
    return value


def config_to_dict(config):
    """The JSON form of a config (tuples become lists)."""
    return dataclasses.asdict(config)


def config_from_dict(config_class, values):
    """Rebuild a config from :func:`config_to_dict`'s output (``run.json``)."""
    names = {field.name for field in dataclasses.fields(config_class)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ValueError(f"{config_class.__name__} has no field(s) {unknown}: the run was "
                         "written by another version of its workflow")
    return config_class(**{key: as_tuple(value) for key, value in values.items()})


def replace_config(configs, name, kind, **overrides):
    """``configs[name]`` (a dataclass) with ``overrides`` replaced.

    ``None`` sets a field that may be None (``ema_decay``, ``backbone``) and
    means "keep the config's value" for the others.

    Raises ValueError naming ``kind`` and the valid names for an unknown
    ``name``, or an unknown field.
    """
    try:
        config = configs[name]
    except (KeyError, TypeError):
        raise ValueError(f"Unknown {kind} config {name!r}. Valid: {', '.join(configs)}") from None
    fields = {field.name: field for field in dataclasses.fields(config)}
    overrides = {k: v for k, v in overrides.items()
                 if v is not None or (k in fields and _field_type(type(config), fields[k])[1])}
    names = set(fields)
    unknown = sorted(set(overrides) - names)
    if unknown:
        raise ValueError(f"Unknown {kind} config field(s) {unknown}. "
                         f"Valid: {', '.join(sorted(names - {'name'}))}")
    return dataclasses.replace(config, **overrides) if overrides else config


# Field checks for config classes' ``__post_init__``: each names the field and the value.

def check_positive(config, *names, integer=True):
    for name in names:
        value = getattr(config, name)
        ok = (not isinstance(value, bool) and isinstance(value, int if integer else (int, float))
              and math.isfinite(value) and value > 0)
        if not ok:
            kind = "a positive integer" if integer else "a positive, finite number"
            raise ValueError(f"{config.name}: `{name}` must be {kind}. Received: {name}={value!r}")


def check_nonnegative(config, *names, integer=True):
    for name in names:
        value = getattr(config, name)
        ok = (not isinstance(value, bool) and isinstance(value, int if integer else (int, float))
              and math.isfinite(value) and value >= 0)
        if not ok:
            kind = "an integer" if integer else "a finite number"
            raise ValueError(f"{config.name}: `{name}` must be {kind} >= 0. "
                             f"Received: {name}={value!r}")


def check_one_of(config, name, choices):
    value = getattr(config, name)
    if value not in choices:
        raise ValueError(f"{config.name}: unknown `{name}`: expected one of {tuple(choices)}. "
                         f"Received: {name}={value!r}")
