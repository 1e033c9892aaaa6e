"""What toyrl refuses across settings, declared once as data: Python raises it, the page evaluates it.

A `Refusal` is a condition and the one line it raises. The condition is a Python expression over
named values, read with `ast` (never run) into a tree of lists (`condition_tree`): names,
constants, + - * // %, comparisons (one operator each), `in`, and, or, not. The message is a
str.format template whose braces hold such expressions (no comparison), each shown as str shows it,
with `!r` (repr) or `:,` (digits grouped), read with string.Formatter into its parts (`parts`);
`say` fills a template that has no condition (a spec key's words, a label's). The names: a Config's
fields (and `approach_tokens`), each stage kind's registered name (`normaliser`) and a stage's
fields (`schedule.ranks`), and what a rule's owner computes for it (`merges`,
`toyrl.train.check_variant`); a name nobody gives is None.

The page (`toyrl.explore.page_data`) ships the trees and parts, and sim.js evaluates them with the
same operators, so both refuse with the same line and sim.js holds neither a rule nor its words.
"""

from __future__ import annotations

import ast
import dataclasses
import operator
import string
from collections.abc import Callable, Iterable, Mapping
from typing import Any

# the tree's operators, by the symbol the page's evaluator (sim.js) knows them by
BINARY: dict[type[ast.AST], str] = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.FloorDiv: "//",
    ast.Mod: "%",
}
COMPARISONS: dict[type[ast.AST], str] = {
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.In: "in",
    ast.NotIn: "not in",
}
OPERATIONS: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "//": operator.floordiv,
    "%": operator.mod,
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "in": lambda a, b: a in b,
    "not in": lambda a, b: a not in b,
}
SHOWN = {("", ""), ("r", ""), ("", ",")}  # (conversion, format spec) a message may give a name


def condition_tree(condition: str) -> list[Any]:
    """A condition as the page evaluates it: ["name", "schedule.ranks"], ["value", 1] or
    [operator, operand, ...] (operators: `OPERATIONS`' and "and", "or", "not")."""
    return _tree(ast.parse(condition, mode="eval").body, condition)


def _tree(node: ast.AST, condition: str) -> list[Any]:
    match node:
        case ast.BoolOp(op=ast.And() | ast.Or() as joined, values=values):
            return ["and" if isinstance(joined, ast.And) else "or", *(_tree(v, condition) for v in values)]
        case ast.UnaryOp(op=ast.Not(), operand=operand):
            return ["not", _tree(operand, condition)]
        case ast.BinOp(left=left, op=op, right=right) if type(op) in BINARY:
            return [BINARY[type(op)], _tree(left, condition), _tree(right, condition)]
        case ast.Compare(left=left, ops=[op], comparators=[right]):
            return [COMPARISONS[type(op)], _tree(left, condition), _tree(right, condition)]
        case ast.Name(id=name):
            return ["name", name]
        case ast.Attribute(value=ast.Name(id=owner), attr=attribute):
            return ["name", f"{owner}.{attribute}"]
        case ast.Constant(value=value) if value is None or isinstance(value, bool | int | float | str):
            return ["value", value]
        case ast.Tuple(elts=items) if all(isinstance(item, ast.Constant) for item in items):
            return ["value", [item.value for item in items if isinstance(item, ast.Constant)]]
    raise ValueError(
        f"a refusal's condition takes names, constants, + - * // %, one comparison, in, and, or, not: "
        f"not {ast.unparse(node)!r} (in {condition!r})"
    )


def names(node: list[Any]) -> set[str]:
    """The names a condition's tree reads."""
    if node[0] == "name":
        return {node[1]}
    if node[0] == "value":
        return set()
    return set().union(*(names(operand) for operand in node[1:]))


def evaluate(node: list[Any], value: Callable[[str], Any]) -> Any:
    """A condition's tree on the values `value(name)` gives."""
    head, *operands = node
    if head == "name":
        return value(operands[0])
    if head == "value":
        return operands[0]
    if head == "and":
        return all(evaluate(operand, value) for operand in operands)
    if head == "or":
        return any(evaluate(operand, value) for operand in operands)
    if head == "not":
        return not evaluate(operands[0], value)
    left, right = (evaluate(operand, value) for operand in operands)
    return OPERATIONS[head](left, right)


def parts(message: str) -> list[list[Any]]:
    """A message template as the page formats it: [text, the tree of the expression in braces or
    None, conversion, format spec] (an expression as a condition's, with no comparison: `!` and `:`
    end it)."""
    out = []
    for text, expression, spec, conversion in string.Formatter().parse(message):
        if expression is not None and ((conversion or ""), (spec or "")) not in SHOWN:
            raise ValueError(f"a refusal's message shows a value as it is, !r or :, (not in {message!r})")
        node = None if expression is None else condition_tree(expression)
        out.append([text, node, conversion or "", spec or ""])
    return out


def shown(value: Any, conversion: str, spec: str) -> str:
    """A value as a message part shows it (`parts`): str, repr, or digits grouped by commas."""
    return repr(value) if conversion == "r" else format(value, spec)


def say(template: str, **given: Any) -> str:
    """A message template (`parts`: what the page formats) with its names given."""
    return "".join(
        text + ("" if node is None else shown(evaluate(node, given.get), conversion, spec))
        for text, node, conversion, spec in parts(template)
    )


@dataclasses.dataclass(frozen=True)
class Refusal:
    """`message` when `condition` holds; `field`: a Config field, whose ConfigError it raises
    (`toyrl.config`: "{field} {message} (got {value!r})")."""

    condition: str
    message: str
    field: str = ""
    tree: list[Any] = dataclasses.field(init=False, repr=False, compare=False)  # the condition, read

    def __post_init__(self) -> None:
        object.__setattr__(self, "tree", condition_tree(self.condition))
        parts(self.message)  # a template the page cannot format is refused here, on import

    def says(self, value: Callable[[str], Any]) -> str:
        """The message, its names given by `value(name)`."""
        return say(self.message, **{name: value(name) for name in self.names()})

    def names(self) -> set[str]:
        """The names its message reads."""
        return set().union(*(names(node) for _, node, _, _ in parts(self.message) if node is not None))

    def data(self) -> dict[str, Any]:
        """As the page reads it (`toyrl.explore.page_data`)."""
        return {"when": self.tree, "message": parts(self.message), "field": self.field}


def first_refused(refusals: Iterable[Refusal], value: Callable[[str], Any]) -> Refusal | None:
    """The first refusal whose condition holds on `value(name)`, or None."""
    return next((refusal for refusal in refusals if evaluate(refusal.tree, value)), None)


def refused_by(refusals: Iterable[Refusal], value: Callable[[str], Any]) -> str:
    """The message of the first refusal whose condition holds on `value(name)`, or ''."""
    refusal = first_refused(refusals, value)
    return "" if refusal is None else refusal.says(value)


def values(
    config: Any, stages: Mapping[str, Any], computed: Mapping[str, Any] | None = None
) -> Callable[[str], Any]:
    """`value(name)` for a refusal: what `computed` gives (a kind's registered name, what a rule's
    owner computes), else `kind.field` of `stages[kind]`, else the configuration's field; None
    for a name none of them has."""

    def value(name: str) -> Any:
        if computed is not None and name in computed:
            return computed[name]
        owner, dot, attribute = name.partition(".")
        if dot:
            return getattr(stages[owner], attribute, None) if owner in stages else None
        return getattr(config, name, None)

    return value
