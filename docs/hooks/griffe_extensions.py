"""Griffe extensions of the API reference.

- ``DocstringMarkup``: the docstrings' Sphinx roles (:func:`name`,
  :class:`~kctx.layers.Hamburger`) render as code, not as raw text, and Keras's "Call
  arguments:" section as a list.
- ``RuntimeDocstrings``: a class whose docstring is assembled when its module runs
  (``__doc__ = <text> + _ARGS``: the KANet modules share their argument list) gets the
  docstring Python sees, which griffe's static reading of the source cannot.
"""

import ast
import importlib
import inspect
import re

import griffe

_ROLE = re.compile(r":(?:func|class|meth|data|attr|mod|obj|exc|py:\w+):`~?([^`]+)`")


class DocstringMarkup(griffe.Extension):
    """Rewrite ``:role:`target``` as ````target```` and list the call arguments, in every
    docstring griffe loads."""

    def on_object(self, *, obj, **kwargs):
        if obj.docstring is not None:
            obj.docstring.value = _call_arguments(_ROLE.sub(r"``\1``", obj.docstring.value))


def _call_arguments(text):
    """Keras's "Call arguments:" section (not a Google-style section griffe knows: it renders
    as an admonition) as a list, one item per argument, like the Args table."""
    lines, inside, indent = text.split("\n"), False, None
    for index, line in enumerate(lines):
        if line.strip() == "Call arguments:":
            inside, indent = True, None
            continue
        if inside and line.strip():
            current = len(line) - len(line.lstrip())
            if current == 0:
                inside = False
                continue
            indent = indent or current
            match = re.match(r"(\s*)(\w+): (.*)", line)
            if current == indent and match:
                lines[index] = f"{match.group(1)}- ``{match.group(2)}``: {match.group(3)}"
    return "\n".join(lines)


class RuntimeDocstrings(griffe.Extension):
    """Read ``__doc__`` from the imported class where the source assigns it."""

    def on_class_members(self, *, node, cls, **kwargs):
        assigns_doc = any(isinstance(statement, ast.Assign)
                          and any(getattr(t, "id", None) == "__doc__" for t in statement.targets)
                          for statement in getattr(node, "body", []))
        if not assigns_doc:
            return
        runtime = getattr(importlib.import_module(cls.module.path), cls.name)
        cls.docstring = griffe.Docstring(inspect.getdoc(runtime), parent=cls)
        if "__init__" in cls.members:
            cls.members["__init__"].parameters = _parameters(runtime)


def _parameters(runtime):
    """The constructor's parameters with those it passes on through ``**kwargs`` to a kctx base
    class (``KroneckerAttention2D(mode, **kwargs)`` takes ``GlobalAttention2D``'s), which such
    a docstring documents."""
    own = list(inspect.signature(runtime.__init__).parameters.values())
    merged, names = [], set()
    for klass in runtime.__mro__:
        if "__init__" not in vars(klass) or not klass.__module__.startswith("kctx."):
            continue
        for parameter in inspect.signature(klass.__init__).parameters.values():
            if parameter.name == "self" or parameter.name in names or parameter.kind in (
                    parameter.VAR_KEYWORD, parameter.VAR_POSITIONAL):
                continue
            merged.append(parameter)
            names.add(parameter.name)
    merged += [p for p in own if p.kind == p.VAR_KEYWORD]
    kinds = {inspect.Parameter.POSITIONAL_OR_KEYWORD: griffe.ParameterKind.positional_or_keyword,
             inspect.Parameter.KEYWORD_ONLY: griffe.ParameterKind.keyword_only,
             inspect.Parameter.VAR_KEYWORD: griffe.ParameterKind.var_keyword}
    return griffe.Parameters(griffe.Parameter("self", kind=griffe.ParameterKind.positional_or_keyword),
                             *[griffe.Parameter(p.name, kind=kinds[p.kind],
                                                default=None if p.default is p.empty
                                                else repr(p.default))
                               for p in merged])
