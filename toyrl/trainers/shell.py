"""A shell script's commands as their words, read with bash's grammar and never run.

Trainers are launched from shell scripts that build their command lines with variables
(`NAME=value`, `export NAME=value`, `${NAME:-default}`), arrays (`ARGS=(...)`, `"${ARGS[@]}"`),
arithmetic (`$((a + b))`) and backslash continuations. `read_script` parses the script with
tree-sitter's bash grammar (the `tree-sitter-bash` package: the optional extra check) and
evaluates only what a reader can know without running anything: assignments in the order the
script makes them, and the expansions of those variables in each command's words. What the
script does not say stays visible as unknown (a `Word`'s `unknown`): a variable it never assigns
(`$HOME`, the environment's), one assigned under a condition, in a loop or by a function, a
command substitution `$(...)`, the script's own arguments `$@`. A setting that depends on one is
named, never guessed (`toyrl.trainers.Unresolved`).
"""

from __future__ import annotations

import codecs
import functools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from toyrl import install
from toyrl.config import InvalidInput

MAX_WORDS = 100_000  # words of all commands and variables: a launch script has a few hundred
MAX_TEXT = 1_000_000  # characters in one word: an expansion that doubles in each assignment stops here
# characters of all the words and values the walk builds: a launch script's, tens of thousands;
# 300,000 lines of A=$A$A or A+=x stop here, before they cost time or memory
MAX_CHARACTERS = 20_000_000
MAX_DEPTH = 20  # bash -c scripts inside one another


@dataclass(frozen=True)
class Word:
    """One word of a command as the shell would pass it, or as far as the script says: `text`
    with each unknown part as the script writes it (`$HOME`), and what those parts are
    (`unknown`, in words). `spread`: a `$@` or `${ARRAY[@]}` whose length is unknown, which may
    stand for any number of words."""

    text: str
    unknown: tuple[str, ...] = ()
    spread: bool = False


@dataclass(frozen=True)
class Command:
    """A simple command of the script: its first line and its words (the command's name first;
    assignments before the name, redirections and what follows a pipe are not words of it);
    `broken`: bash's grammar cannot read all of it."""

    line: int
    words: list[Word]
    broken: bool = False
    last: int = 0  # its last line


@dataclass(frozen=True)
class Script:
    """A script's commands, and the lines bash's grammar cannot read (`broken`: a placeholder such
    as `NAME=<path>`, an unclosed quote), which the walk reads past."""

    commands: list[Command]
    broken: list[int]


@dataclass
class _Value:
    """A variable's value: its words (one for a string, the elements for an array), or unknown."""

    words: list[Word]
    array: bool = False


@dataclass
class _State:
    """What the walk knows: the variables assigned so far, the commands found, and the depth of
    conditions and loops it is inside (an assignment there may or may not happen)."""

    variables: dict[str, _Value] = field(default_factory=dict)
    commands: list[Command] = field(default_factory=list)
    uncertain: str = ""  # why an assignment here may not happen ("" at the top level)
    words: int = 0
    characters: int = 0  # built by expansions, counted against MAX_CHARACTERS
    depth: int = 0  # of bash -c scripts inside one another
    functions: set[str] = field(default_factory=set)  # the script's functions: a call may assign any variable


@functools.cache
def _parser() -> Any:
    try:
        import tree_sitter_bash
        from tree_sitter import Language, Parser
    except ImportError:
        raise InvalidInput(
            f"reading a shell script needs tree-sitter's bash grammar: {install.hint('check')}"
        ) from None
    return Parser(Language(tree_sitter_bash.language()))


def read_script(text: str, origin: str) -> Script:
    """The simple commands of a shell script (`text`), in the order they appear, with their words
    expanded as far as the script's own assignments tell (module docstring), and the lines bash's
    grammar cannot read. What those lines assign is not known to the commands after them.

    InvalidInput, naming the script (`origin`) and the line of the statement, where its expansions
    would build more than MAX_WORDS words, a word of more than MAX_TEXT characters or
    MAX_CHARACTERS in all (each counted as it grows, before it is built), or the statement nests
    deeper than the reader's stack."""
    try:
        tree = _parser().parse(text.encode("utf-8"))
    except InvalidInput as error:  # without the grammar
        raise InvalidInput(f"{origin}: {error}") from None
    state = _State()
    for statement in tree.root_node.named_children:
        where = f"{origin}, line {statement.start_point[0] + 1}"
        try:
            _statement(statement, state)
        except _TooLarge as error:
            raise InvalidInput(f"{where}: {error}") from None
        except RecursionError:
            raise InvalidInput(
                f"{where}: nested too deeply to read ($(( )), ${{ }}, if or brackets)"
            ) from None
    return Script(state.commands, _errors(tree.root_node) if tree.root_node.has_error else [])


class _TooLarge(Exception):
    """A bound of the expansion, told with the line of the script's statement that reaches it."""


def _errors(node: Any) -> list[int]:
    """The first line of each place the parser could not read."""
    lines: list[int] = []
    pending = [node]
    while pending:
        current = pending.pop()
        if current.type == "ERROR" or current.is_missing:
            lines.append(int(current.start_point[0]) + 1)
            continue
        pending += [child for child in current.children if child.has_error or child.is_missing]
    return sorted(set(lines))


COMPOUND = {
    "if_statement": "under a condition",
    "elif_clause": "under a condition",
    "else_clause": "under a condition",
    "case_statement": "in a case",
    "case_item": "in a case",
    "for_statement": "in a loop",
    "c_style_for_statement": "in a loop",
    "while_statement": "in a loop",
    "function_definition": "in a function",
    "subshell": "in a subshell",
}


def _statements(node: Any, state: _State) -> None:
    """Walk `node`'s statements in order: assignments change the variables, commands are kept."""
    for child in node.named_children:
        _statement(child, state)


def _statement(child: Any, state: _State) -> None:
    """One statement (`_statements`)."""
    kind = child.type
    if kind == "variable_assignment":
        _assign(child, state)
    elif kind == "declaration_command":
        line = child.start_point[0] + 1
        for part in child.named_children:
            if part.type == "variable_assignment":
                _assign(part, state)
            elif _text(part) == "-n" or part.type not in ("word", "variable_name"):  # -n, $(...)
                why = f"{_text(child).split()[0]} (line {line}) may change it, and toyrl does not evaluate it"
                _forget(state, list(state.variables), why)
    elif kind == "unset_command":
        for part in child.named_children[1:]:
            state.variables.pop(_text(part), None)
    elif kind == "command":
        _command(child, state)
    elif kind in ("list", "pipeline"):
        _chain(child, state)
    elif kind == "compound_statement" and child.children and child.children[0].type == "((":
        _arithmetic_command(child, state)
    elif kind in COMPOUND:
        outer = state.uncertain
        line = child.start_point[0] + 1
        state.uncertain = outer or f"assigned {COMPOUND[kind]} (line {line})"
        _statements(child, state)
        state.uncertain = outer
        loop_variable = child.child_by_field_name("variable")  # for N in ...: N after the loop
        if kind == "for_statement" and loop_variable is not None:
            _forget(state, [_text(loop_variable)], f"the loop of line {line} assigns it")
        name = child.child_by_field_name("name")
        if kind == "function_definition" and name is not None:
            state.functions.add(_text(name))
    elif kind not in (
        "ERROR",
        "comment",
        "heredoc_body",
        "file_redirect",
        "heredoc_redirect",
        "herestring_redirect",
    ):
        _statements(child, state)  # lists, pipelines, redirected statements, compound bodies


def _chain(node: Any, state: _State) -> None:
    """`a && b || c`: what follows && or || may not run; `a | b`: each side runs in a subshell,
    whose assignments the script does not keep."""
    outer = state.uncertain
    line = node.start_point[0] + 1
    for part in node.children:
        if part.type in ("&&", "||") and not outer:
            state.uncertain = f"assigned after {part.type} (line {line})"
        elif part.type in ("|", "|&") and not outer:
            state.uncertain = f"assigned in a pipeline (line {line})"
        elif part.is_named:
            if node.type == "pipeline" and not outer:
                state.uncertain = f"assigned in a pipeline (line {line})"
            _statement(part, state)
    state.uncertain = outer


def _arithmetic_command(node: Any, state: _State) -> None:
    """`((N = 16))`, `((N++))`: the variables it names may be assigned; unknown from here."""
    _forget_arithmetic(node, state)


ARITHMETIC_ASSIGNMENTS = frozenset("= += -= *= /= %= <<= >>= &= |= ^= ++ --".split())


def _forget_arithmetic(node: Any, state: _State) -> None:
    """Where arithmetic (`(( ))`, `$(( ))`) assigns (`=`, `+=`, `++`, ...), the variables it names
    are unknown from here: toyrl evaluates values, not assignments."""
    names, assigns = [], False
    pending = list(node.children)
    while pending:
        current = pending.pop()
        assigns = assigns or (not current.is_named and current.type in ARITHMETIC_ASSIGNMENTS)
        if current.type == "variable_name":
            names.append(_text(current))
        pending += current.children
    if assigns:
        _forget(state, names, f"the arithmetic of line {node.start_point[0] + 1} may assign it")


def _assign(node: Any, state: _State) -> None:
    """`NAME=value`, `NAME+=value`, `NAME=(a b c)`: no word splitting in a string's value."""
    name_node = node.child_by_field_name("name")
    value_node = node.child_by_field_name("value")
    name = _text(name_node)
    if name_node.type == "subscript":  # ARRAY[i]=value: the array's elements unknown from here
        name = _text(name_node.child_by_field_name("name"))
        state.variables[name] = _unknown_value(
            f"${{{name}[@]}}", "an array changed element by element", array=True
        )
        return
    append = any(child.type == "+=" for child in node.children)
    if value_node is None:
        value = _Value([Word("")])
    elif value_node.type == "array":
        elements: list[Word] = []
        for element in value_node.named_children:
            if element.type != "comment":
                fields = _fields(element, state, split=True)
                _count(state, fields)  # as the array grows: ($A $A ...) of a long $A stops early
                elements += fields
        value = _Value(elements, array=True)
    else:
        value = _Value([_join(_fields(value_node, state, split=False), state)])
        _count(state, value.words)
    if state.uncertain:
        why = f"${name} is {state.uncertain}"
        value = _unknown_value(f"${name}", why, array=value.array)
    elif append and name in state.variables:
        before = state.variables[name]
        if value.array or before.array:
            value = _Value(before.words + value.words, array=True)
        else:
            value = _Value([_join([before.words[0], value.words[0]], state)])
    state.variables[name] = value


def _unknown_value(text: str, why: str, array: bool = False) -> _Value:
    return _Value([Word(text, (why,), spread=array)], array=array)


def _command(node: Any, state: _State) -> None:
    words: list[Word] = []
    for child in node.named_children:
        if child.type in ("variable_assignment", "file_redirect", "herestring_redirect", "comment"):
            continue  # an assignment before the name is the command's environment only
        if child.type == "command_name":
            child = child.named_children[0]
        fields = _fields(child, state, split=True)
        _count(state, fields)  # as the command grows: a word that splits into a million stops early
        words += fields
    line = node.start_point[0] + 1
    if words:
        state.commands.append(Command(line, words, bool(node.has_error), node.end_point[0] + 1))
    texts = [word.text for word in words]
    for i, text in enumerate(texts[:-2]):  # bash -c SCRIPT, also after a wrapper (srun, nohup)
        if text.rsplit("/", 1)[-1] in SHELLS and texts[i + 1] == "-c":
            _inner(words[i + 2], line, state)
            break
    if texts:
        _forget_assigned(texts, line, state)


# commands that assign variables toyrl does not evaluate: any variable (a file sourced, text
# evaluated), or those they name (read N, let N=16, printf -v N)
ASSIGN_ANY = ("source", ".", "eval")
ASSIGN_NAMED = ("read", "mapfile", "readarray", "let", "printf", "getopts")


def _forget_assigned(texts: list[str], line: int, state: _State) -> None:
    """After a command that may assign variables the walk does not evaluate, those variables are
    unknown from here: every one after `source`, `.` and `eval`; the ones named after `read`,
    `mapfile`, `readarray`, `let`, `printf -v` and `getopts` (each argument's name before `=`, `+`
    or `-`, as `let` takes `N=16` or `N++`)."""
    name = texts[0]
    if name in ASSIGN_ANY or name in state.functions:
        why = f"{name} (line {line}) may change it, and toyrl does not run it"
        _forget(state, list(state.variables), why)
    elif name in ASSIGN_NAMED:
        names = [_leading_name(text) for text in texts[1:]]
        _forget(state, [n for n in names if n], f"{name} (line {line}) may assign it when the script runs")


def _leading_name(text: str) -> str:
    """The variable name an argument starts with (`N` of `N=16`, `N++`), or ""."""
    end = 0
    while end < len(text) and (text[end] == "_" or (text[end].isascii() and text[end].isalnum())):
        end += 1
    return text[:end] if end and not text[0].isdigit() else ""


def _forget(state: _State, names: list[str], why: str) -> None:
    for name in names:
        array = name in state.variables and state.variables[name].array
        state.variables[name] = _unknown_value(f"${name}", f"${name}: {why}", array=array)


SHELLS = ("bash", "sh", "zsh", "dash")


def _inner(script: Word, line: int, state: _State) -> None:
    """`bash -c SCRIPT`: its commands, read as the script's own (at the line of `bash -c`), with
    the variables the outer script has set so far."""
    if state.depth >= MAX_DEPTH:
        raise _TooLarge(f"more than {MAX_DEPTH} levels of bash -c inside one another")
    tree = _parser().parse(script.text.encode("utf-8"))
    inner = _State(  # a child shell
        dict(state.variables), [], state.uncertain, state.words, state.characters, state.depth + 1
    )
    _statements(tree.root_node, inner)
    state.words, state.characters = inner.words, inner.characters
    state.commands += [
        Command(line, command.words, command.broken or tree.root_node.has_error, line)
        for command in inner.commands
    ]


def _count(state: _State, words: list[Word]) -> None:
    """Count `words` against MAX_WORDS and their characters against MAX_CHARACTERS."""
    state.words += len(words)
    if state.words > MAX_WORDS:
        raise _TooLarge(
            f"more than {MAX_WORDS:,} words once its variables are expanded; a launch script has hundreds"
        )
    _characters(state, sum(len(word.text) for word in words))


def _characters(state: _State, count: int) -> None:
    state.characters += count
    if state.characters > MAX_CHARACTERS:
        raise _TooLarge(
            f"more than {MAX_CHARACTERS:,} characters built by expanding its variables; a launch script "
            "builds thousands"
        )


def _join(words: list[Word], state: _State) -> Word:
    """One word of `words`' texts, counted before it is built (MAX_TEXT, MAX_CHARACTERS)."""
    if len(words) == 1:
        return words[0]
    length = sum(len(word.text) for word in words)
    if length > MAX_TEXT:
        raise _TooLarge(f"a word of more than {MAX_TEXT:,} characters once its variables are expanded")
    _characters(state, length)
    unknown = tuple(dict.fromkeys(why for word in words for why in word.unknown))
    return Word("".join(word.text for word in words), unknown, any(word.spread for word in words))


def _fields(node: Any, state: _State, split: bool) -> list[Word]:
    """The words `node` stands for: several where an unquoted expansion splits on whitespace
    (`split`) or an array is spread, one otherwise."""
    kind = node.type
    if kind in ("word", "number"):
        return [Word(_unescape(_text(node)))]
    if kind == "raw_string":
        return [Word(_text(node)[1:-1])]
    if kind == "ansi_c_string":
        return [Word(codecs.decode(_text(node)[2:-1], "unicode_escape"))]
    if kind in ("string", "translated_string"):
        return _quoted(node, state)
    if kind == "concatenation":  # each part's first word joins the previous part's last
        words: list[Word] = []
        last: list[Word] = []  # the pieces of the word being built, joined once
        for child in node.named_children:
            part = _fields(child, state, split)
            if not part:
                continue
            last.append(part[0])
            if len(part) > 1:
                words += [_join(last, state), *part[1:-1]]
                last = [part[-1]]
        return [*words, _join(last, state)] if last else words
    if kind in ("simple_expansion", "expansion"):
        return _expand(node, state, split, quoted=False)
    if kind == "arithmetic_expansion":
        return [_arithmetic(node, state)]
    if kind in ("command_substitution", "process_substitution"):
        return [Word(_text(node), (f"{_text(node)} is a command's output, which toyrl does not run",))]
    return [Word(_text(node))]  # a glob, a brace expression or a test: as written


def _quoted(node: Any, state: _State) -> list[Word]:
    """A double-quoted string: one word, but `"${ARRAY[@]}"` and `"$@"` are one word per element."""
    parts: list[Word] = []
    spread: list[Word] | None = None
    for child in node.named_children:
        if child.type == "string_content":
            parts.append(Word(_unescape_quoted(_text(child))))
        elif child.type in ("simple_expansion", "expansion"):
            words = _expand(child, state, split=False, quoted=True)
            if len(words) != 1 or words[0].spread:
                spread = words
            parts.append(_join(words, state))
        else:
            parts += _fields(child, state, split=False)
    if spread is not None and len(node.named_children) == 1:
        return spread
    return [_join(parts, state)]


SPECIAL = {"@": "the script's own arguments ($@)", "*": "the script's own arguments ($*)"}


def _expand(node: Any, state: _State, split: bool, quoted: bool) -> list[Word]:
    """`$NAME`, `${NAME}`, `${NAME:-default}` (and `-`, `:=`, `=`, `:+`, `+`), `${ARRAY[@]}`,
    `${ARRAY[i]}`; any other form is unknown."""
    text = _text(node)
    names = [
        child for child in node.named_children if child.type in ("variable_name", "special_variable_name")
    ]
    subscript = next((child for child in node.named_children if child.type == "subscript"), None)
    if subscript is not None:
        array = _text(subscript.child_by_field_name("name"))
        index = _text(subscript.child_by_field_name("index"))
        value = state.variables.get(array)
        if value is None:
            return [Word(text, (f"${array} is not set in the script",), spread=index in "@*")]
        if len(node.named_children) > 1:
            return [Word(text, (f"{text} is an expansion toyrl does not evaluate",))]
        if index in ("@", "*"):
            return value.words if (split or quoted) else [_join(value.words, state)]
        if index.isdigit() and value.array:
            return [value.words[int(index)]] if int(index) < len(value.words) else []
        return [Word(text, (f"{text} is an expansion toyrl does not evaluate",))]
    if len(names) != 1 or names[0].type == "special_variable_name" or _text(names[0]).isdigit():
        special = _text(names[0]) if names else ""
        why = SPECIAL.get(special, f"{text} is the shell's, not the script's")
        return [Word(text, (why,), spread=special in SPECIAL)]
    name = _text(names[0])
    operator = _operator(node)
    value = state.variables.get(name)
    if operator is None and len(node.named_children) > 1:
        return [Word(text, (f"{text} is an expansion toyrl does not evaluate",))]
    if operator is not None:
        operand = next((child for child in node.named_children if child.start_byte > names[0].end_byte), None)
        alternative = _join(_fields(operand, state, split=False), state) if operand is not None else Word("")
        empty = value is None or (
            operator.startswith(":") and _join(value.words, state).text == "" and not value.words[0].unknown
        )
        if operator in (":-", "-", ":=", "="):
            if value is not None and value.words[0].unknown:
                return [Word(text, value.words[0].unknown)]
            if value is None or (operator.startswith(":") and empty):
                if operator.endswith("="):
                    state.variables[name] = _Value([alternative])
                return _split(alternative) if split else [alternative]
        elif operator in (":+", "+"):
            if value is not None and value.words[0].unknown:
                return [Word(text, value.words[0].unknown)]
            return [] if empty and operator == ":+" else ([alternative] if value is not None else [])
        else:
            return [Word(text, (f"{text} is an expansion toyrl does not evaluate",))]
    if value is None:
        return [Word(text, (f"${name} is not set in the script",))]
    word = value.words[0] if value.words else Word("")
    return _split(word) if split else [word]


# the operators of ${NAME<operator>word}: defaults and alternatives are evaluated, the rest unknown
OPERATORS = frozenset(":- - := = :+ + :? ? # ## % %% / // ^ , :".split())


def _operator(node: Any) -> str | None:
    for child in node.children:
        if not child.is_named and child.type in OPERATORS:
            return str(child.type)
    return None


def _split(word: Word) -> list[Word]:
    """An unquoted expansion's words: split on whitespace (the default IFS), none if it is empty."""
    if word.unknown:
        return [word]
    return [Word(part) for part in word.text.split()]


def _arithmetic(node: Any, state: _State) -> Word:
    """`$((expression))` of integers, the script's variables and + - * / % ( ), as bash computes
    it (in 64-bit integers that wrap around, division truncating towards zero); unknown otherwise."""
    text = _text(node)
    try:
        word = Word(str(_evaluate(node.named_children[0], state)))
    except _Unknown as unknown:
        word = Word(text, (str(unknown) or f"{text} is arithmetic toyrl does not evaluate",))
    _forget_arithmetic(node, state)
    return word


class _Unknown(Exception):
    pass


def _wrapped(value: int) -> int:
    """`value` as bash's 64-bit arithmetic holds it (wrapping around): 3 squared forty times stays
    a number of 19 digits, never one of a trillion."""
    return (value + 2**63) % 2**64 - 2**63


def _evaluate(node: Any, state: _State) -> int:
    kind = node.type
    if kind == "number":
        try:
            return _wrapped(int(_text(node), 0))
        except ValueError:
            raise _Unknown from None
    if kind in ("variable_name", "simple_expansion", "expansion"):
        name = _text(node).strip("${}")
        value = state.variables.get(name)
        if value is None or not value.words or value.words[0].unknown:
            raise _Unknown(
                f"${name} is not set in the script" if value is None else value.words[0].unknown[0]
            )
        try:
            return _wrapped(int(value.words[0].text.strip() or "0", 0))
        except ValueError:
            raise _Unknown(f"${name} is not an integer") from None
    if kind == "parenthesized_expression" and len(node.named_children) == 1:
        return _evaluate(node.named_children[0], state)
    if kind == "unary_expression" and len(node.children) == 2 and node.children[0].type in ("-", "+"):
        operand = _evaluate(node.named_children[0], state)
        return _wrapped(-operand) if node.children[0].type == "-" else operand
    if kind == "binary_expression" and len(node.named_children) == 2:
        left, right = (_evaluate(child, state) for child in node.named_children)
        operator = node.child_by_field_name("operator")
        symbol = operator.type if operator is not None else ""
        if symbol == "+":
            return _wrapped(left + right)
        if symbol == "-":
            return _wrapped(left - right)
        if symbol == "*":
            return _wrapped(left * right)
        if symbol in ("/", "%") and right != 0:
            quotient = abs(left) // abs(right) * (1 if (left >= 0) == (right >= 0) else -1)
            return _wrapped(quotient if symbol == "/" else left - quotient * right)
    raise _Unknown


def _text(node: Any) -> str:
    return bytes(node.text).decode("utf-8")


def _unescape(text: str) -> str:
    """An unquoted word's backslashes: each quotes the next character (a backslash-newline is gone)."""
    return "".join(_unescaped(text, lambda char: True))


def _unescape_quoted(text: str) -> str:
    """Inside double quotes a backslash quotes only $ ` " \\ and a newline."""
    return "".join(_unescaped(text, lambda char: char in '$`"\\\n'))


def _unescaped(text: str, quotes: Any) -> Iterator[str]:
    chars = iter(text)
    for char in chars:
        if char != "\\":
            yield char
            continue
        following = next(chars, "")
        if following == "\n":
            continue
        yield following if quotes(following) else char + following
