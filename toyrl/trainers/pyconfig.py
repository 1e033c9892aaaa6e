"""A trainer's settings in Python source: the keyword arguments of its configuration's constructor.

TRL's documentation and its users' scripts give GRPO's settings as a call, `GRPOConfig(
loss_type="dr_grpo", beta=0.0, ...)`. `read_python` finds that call in the source's syntax tree
(`ast`) and reads its keyword arguments. The source is never imported nor run: a script loads a
model, reads the environment and starts training, and toyrl only needs what the call says. A value
the call spells as a literal is read as Python reads it; one it computes (a variable, an f-string,
a call, arithmetic) is not known without running the script, and stays `Unresolved`.
"""

from __future__ import annotations

import ast
import io
import json
import textwrap
import tokenize
import warnings
from typing import Any

from toyrl.config import InvalidInput
from toyrl.inputs import json_problem
from toyrl.trainers import Unresolved

# constructor -> the trainer (its registry name) whose settings it takes; Unsloth uses TRL's GRPOConfig
CONSTRUCTORS = {"GRPOConfig": "trl"}
EXPECTED = " or ".join(f"{name}(...)" for name in CONSTRUCTORS)


def read_python(text: str, origin: str) -> tuple[str, dict[str, Any], int]:
    """(trainer, settings, line) of the one constructor call in Python source `text` (CONSTRUCTORS:
    `GRPOConfig(...)`, `trl.GRPOConfig(...)`, or a name it is imported as, `from trl import
    GRPOConfig as Config`): the trainer's registry name, its keyword arguments (name -> value) and
    the call's first line (1-based). `origin` names the source in messages.

    A literal value (`ast.literal_eval`: numbers, strings, True/False/None, lists, tuples, dicts)
    is read as Python reads it; any other is `Unresolved(its source text, why)`, which `resolve`
    refuses in one line where toyrl reads that setting and lists as not read otherwise. Positional
    arguments (GRPOConfig's first is output_dir, which toyrl does not read) are skipped. A `**name`
    splat is kept as the key `"**name"` (the splat's source text, never a keyword's name) mapped to
    an Unresolved: the settings it holds are unknown, and the caller tells the user so.

    InvalidInput, in one line, for source Python does not parse (a keyword given twice in the call
    included, as Python's compiler refuses it), nesting deeper than the parser or the reading
    takes, an integer of more digits than Python converts, and no call or several."""
    elided = False
    try:
        with warnings.catch_warnings():  # an invalid escape ("\d") warns, or is an error under -W error
            warnings.simplefilter("ignore")
            try:
                tree = ast.parse(text)
            except SyntaxError:  # a snippet of documentation: indented as a list's item, `...` elisions
                dedented = textwrap.dedent(text)
                shorter = _without_elisions(dedented)
                if shorter == text:
                    raise
                tree = ast.parse(shorter)  # an error here is one of the source's, not an elision's
                elided = shorter != dedented
    except SyntaxError as error:
        where = f", line {error.lineno}" if error.lineno else ""
        raise InvalidInput(f"{origin}: not valid Python ({error.msg}{where})") from None
    except ValueError as error:  # a lone surrogate (not UTF-8); null bytes, in Python 3.10
        raise InvalidInput(f"{origin}: not valid Python ({json_problem(error)})") from None
    except (RecursionError, MemoryError):  # the parser's own stack: thousands of `-` or `x.` in a row
        raise InvalidInput(f"{origin}: nested too deeply for Python's parser") from None
    try:
        trainer, settings, line = _read_call(tree, origin)
    except (RecursionError, MemoryError):  # an expression Python parses and literal_eval or unparse cannot
        raise InvalidInput(f"{origin}: an argument of {EXPECTED} is nested too deeply to read") from None
    if elided:
        settings[ELISION] = ELIDED
    return trainer, settings, line


# documentation's `...` for "the other arguments": the settings it stands for are unknown
ELISION = "**..."
ELIDED = Unresolved(
    "...", "the call's ... elisions, as documentation writes them: the settings there are unread"
)


def _without_elisions(text: str) -> str:
    """`text` without the `...` that documentation writes for "other arguments" in a call
    (`GRPOConfig(..., loss_type="dr_grpo")`, or alone on a line): each ellipsis token standing as a
    whole argument (after `(` or `,`, and before `,`, `)` or the next line), with its comma, found
    by Python's own tokenizer; `text` as it is when it does not tokenize."""
    try:
        tokens = [
            token
            for token in tokenize.generate_tokens(io.StringIO(text).readline)
            if token.type
            not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT)
        ]
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return text
    lines = text.splitlines(keepends=True)
    cuts = []
    for i, token in enumerate(tokens[1:-1], start=1):
        before, after = tokens[i - 1].string, tokens[i + 1].string
        own_line = tokens[i + 1].start[0] > token.end[0]  # `...` alone on its line, no comma after it
        if token.string == "..." and before in ("(", ",") and (after in (",", ")") or own_line):
            comma = after == "," and tokens[i + 1].start[0] == token.start[0]
            cuts.append((token.start, tokens[i + 1].end if comma else token.end))
    for (row, first), (_, last) in reversed(cuts):
        text_of_row = lines[row - 1]
        lines[row - 1] = text_of_row[:first] + text_of_row[last:]
    return "".join(lines)


def _read_call(tree: ast.Module, origin: str) -> tuple[str, dict[str, Any], int]:
    """The trainer, settings and line of the one constructor call in `tree` (`read_python`)."""
    names = dict(CONSTRUCTORS)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            names |= {
                alias.asname: CONSTRUCTORS[alias.name]
                for alias in node.names
                if alias.asname and alias.name in CONSTRUCTORS
            }
    calls = sorted(
        (node for node in ast.walk(tree) if isinstance(node, ast.Call) and _constructor(node.func, names)),
        key=lambda node: (node.lineno, node.col_offset),
    )
    if not calls:
        raise InvalidInput(
            f"{origin}: no {EXPECTED} call in it; toyrl reads a trainer's settings in Python from the "
            "keyword arguments of one"
        )
    if len(calls) > 1:
        lines = ", ".join(str(call.lineno) for call in calls)
        raise InvalidInput(
            f"{origin}: {len(calls)} {EXPECTED} calls (lines {lines}); toyrl checks one: keep one in the file"
        )
    call = calls[0]
    constants = _constants(tree, call.lineno)
    settings: dict[str, Any] = {}
    if any(isinstance(argument, ast.Constant) and argument.value is Ellipsis for argument in call.args):
        settings[ELISION] = ELIDED
    for keyword in call.keywords:
        if keyword.arg is None:
            splat = f"**{_source(keyword.value, origin, '**')}"
            settings[splat] = Unresolved(
                splat,
                "a ** splat in the Python source: toyrl does not run it, so the settings it holds are "
                "unknown; give those that matter with --set NAME=VALUE",
            )
            continue
        if keyword.arg in settings:
            repeated = f"keyword argument repeated: {keyword.arg}, line {keyword.lineno}"
            raise InvalidInput(f"{origin}: not valid Python ({repeated})")
        settings[keyword.arg] = _value(keyword.arg, keyword.value, origin, constants)
    trainer = _constructor(call.func, names)
    if trainer == "trl" and _imports(tree, "unsloth"):
        trainer = "unsloth"  # TRL's GRPOConfig, trained by Unsloth's patched GRPOTrainer
    return trainer, settings | _assigned_later(tree, trainer, settings), call.lineno


def _imports(tree: ast.Module, package: str) -> bool:
    """Whether the source imports `package` or anything from it."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(alias.name.split(".")[0] == package for alias in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.level == 0:
            if (node.module or "").split(".")[0] == package:
                return True
    return False


def notebook_source(text: str, origin: str) -> str:
    """A Jupyter notebook's code cells as one Python source, in order, each line of IPython's own
    syntax (`!pip install ...`, `%%capture`) turned into a blank statement at its indentation, as
    IPython turns it into a call: the lines of its code cells keep their numbers within the cell
    only, so a message names the cell's first line in the joined source."""
    try:
        notebook = json.loads(text)
    except json.JSONDecodeError as error:
        problem = f"not valid JSON: {error.msg}, line {error.lineno}"
        raise InvalidInput(f"{origin}: not a Jupyter notebook ({problem})") from None
    cells = notebook.get("cells") if isinstance(notebook, dict) else None
    if not isinstance(cells, list):
        raise InvalidInput(f"{origin}: not a Jupyter notebook (no list of cells)")
    lines: list[str] = []
    for cell in cells:
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        text_of_cell = "".join(source) if isinstance(source, list) else str(source)
        for line in text_of_cell.splitlines():
            stripped = line.lstrip()
            if stripped.startswith(("!", "%")):
                line = line[: len(line) - len(stripped)] + "pass"
            lines.append(line)
        lines.append("")
    return "\n".join(lines)


def _assigned_later(tree: ast.Module, trainer: str, settings: dict[str, Any]) -> dict[str, Unresolved]:
    """The settings the source assigns as attributes besides the call (`config.loss_type =
    "dr_grpo"`, `trainer.args.beta = 0.0`, `setattr(config, "beta", 0.0)`), anywhere in it: which
    value the run takes depends on the order the script runs in, so each is Unresolved (refused
    where toyrl reads it, with its --set), never the call's value taken as the run's."""
    from toyrl.trainers import registry

    releases = registry()[trainer].releases.values()
    names = set(settings) | {name for release in releases for name in (*release.settings, *release.aliases)}
    later: dict[str, Unresolved] = {}
    for node in ast.walk(tree):
        assigned: list[tuple[str, ast.expr | None]] = []  # (attribute, value)
        if isinstance(node, ast.Assign):
            assigned = [(t.attr, node.value) for t in node.targets if isinstance(t, ast.Attribute)]
        elif isinstance(node, ast.AugAssign | ast.AnnAssign) and isinstance(node.target, ast.Attribute):
            assigned = [(node.target.attr, node.value)]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr":
            name = node.args[1] if len(node.args) >= 2 else None
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                assigned = [(name.value, node.args[2] if len(node.args) > 2 else None)]
        for attribute, value in assigned:
            if attribute in names and attribute not in later:
                line = getattr(node, "lineno", 0)
                later[attribute] = Unresolved(
                    _source(value, "", attribute) if value is not None else "...",
                    f"assigned as an attribute (line {line}) besides the {EXPECTED} call, so the value "
                    f"the run takes depends on how the script runs; give it with --set {attribute}=VALUE",
                )
    return later


def _constructor(function: ast.expr, names: dict[str, str]) -> str:
    """The trainer whose constructor `function` is (a name bound to one, or an attribute ending in
    one: `trl.GRPOConfig`), or "" when it is none."""
    if isinstance(function, ast.Name):
        return names.get(function.id, "")
    if isinstance(function, ast.Attribute):
        return CONSTRUCTORS.get(function.attr, "")
    return ""


def _value(name: str, node: ast.expr, origin: str, constants: dict[str, ast.expr]) -> Any:
    """A keyword argument's value: the literal, or the arithmetic of the script's constants
    (`_folded`), else Unresolved naming the setting's `--set`: a value computed when the script
    runs, for which the check takes the release's default and says so."""
    try:
        value = _folded(node, constants, set())
    except _NotFolded:
        return Unresolved(
            _source(node, origin, name),
            "computed when the script runs (not a literal, nor arithmetic on names the script assigns "
            f"once to one); give it with --set {name}=VALUE",
            at_run=True,
        )
    try:
        repr(value)  # every message shows values by their repr
    except ValueError as error:
        raise InvalidInput(f"{origin}, line {node.lineno}: {name}: {json_problem(error)}") from None
    return value


class _NotFolded(Exception):
    pass


# the arithmetic `_folded` does, on int and float operands: what notebooks write to derive a length
_OPERATORS: dict[type, Any] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: a % b,
}
_MAGNITUDE = 2**64  # an operand beyond it is not folded: a product of such could grow without bound


def _folded(node: ast.expr, constants: dict[str, ast.expr], seen: set[str]) -> Any:
    """`node`'s value without running anything: a literal (`ast.literal_eval`), a name the script
    assigns once, at its top level, before the call (`_constants`), or +, -, *, /, //, % and unary
    minus on integers and floats of such; _NotFolded for anything else (a call, an attribute, a
    name bound twice or in a function, a division by zero)."""
    if isinstance(node, ast.Name):
        if node.id not in constants or node.id in seen:
            raise _NotFolded
        return _folded(constants[node.id], constants, seen | {node.id})
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _folded(node.left, constants, seen), _folded(node.right, constants, seen)
        if not all(_number(value) for value in (left, right)):
            raise _NotFolded
        try:
            return _OPERATORS[type(node.op)](left, right)
        except ZeroDivisionError:
            raise _NotFolded from None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        operand = _folded(node.operand, constants, seen)
        if not _number(operand):
            raise _NotFolded
        return -operand if isinstance(node.op, ast.USub) else operand
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        # not a literal; TypeError: a literal dict or set of unhashable keys
        raise _NotFolded from None


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and abs(value) <= _MAGNITUDE


def _constants(tree: ast.Module, before: int) -> dict[str, ast.expr]:
    """The names the script binds exactly once, by an assignment at its top level before line
    `before` (`max_seq_length = 1024`), to the expression assigned: the only names whose value
    at the call is known without running it. A name bound anywhere else too (a loop, a function,
    an import, `+=`, a second assignment) is not one."""
    bound: dict[str, int] = {}
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names = [node.id]
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names = [node.name]
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names = [(alias.asname or alias.name).split(".")[0] for alias in node.names]
        elif isinstance(node, ast.Global | ast.Nonlocal):
            names = list(node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names = [node.name]
        for name in names:
            bound[name] = bound.get(name, 0) + 1
    constants = {}
    for statement in tree.body:
        if (
            isinstance(statement, ast.Assign)
            and statement.lineno < before
            and len(statement.targets) == 1
            and isinstance(statement.targets[0], ast.Name)
            and bound.get(statement.targets[0].id) == 1
        ):
            constants[statement.targets[0].id] = statement.value
    return constants


def _source(node: ast.expr, origin: str, name: str) -> str:
    """`node`'s source text, on one line (`ast.unparse`), or InvalidInput when it holds an integer
    of more digits than Python converts to text (a hexadecimal literal of thousands of digits)."""
    try:
        return ast.unparse(node)
    except ValueError as error:
        raise InvalidInput(f"{origin}, line {node.lineno}: {name}: {json_problem(error)}") from None
