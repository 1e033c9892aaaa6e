"""Reading a trainer's settings from Python source (`toyrl.trainers.pyconfig.read_python`): the
keyword arguments of one `GRPOConfig(...)` call, literals as Python reads them, the rest
Unresolved, and bad source answered in one line."""

from __future__ import annotations

import string
import warnings
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toyrl.config import InvalidInput
from toyrl.trainers import Unresolved, resolve
from toyrl.trainers.pyconfig import read_python

ORIGIN = "train.py"


def refusal(text: str) -> str:
    with pytest.raises(InvalidInput) as raised:
        read_python(text, ORIGIN)
    return str(raised.value)


def test_literal_values_as_python_reads_them() -> None:
    text = """from trl import GRPOConfig

training_args = GRPOConfig(
    loss_type="dr_grpo",
    scale_rewards=False,
    epsilon=0.2,
    epsilon_high=-0.28,
    num_iterations=2,
    delta=None,
    report_to=["wandb", 'tensorboard'],
    betas=(0.9, 0.99),
    model_init_kwargs={"torch_dtype": "bfloat16", "trust_remote_code": True},
    learning_rate=1e-6,
    max_steps=0x10,
)
"""
    assert read_python(text, ORIGIN) == (
        "trl",
        {
            "loss_type": "dr_grpo",
            "scale_rewards": False,
            "epsilon": 0.2,
            "epsilon_high": -0.28,
            "num_iterations": 2,
            "delta": None,
            "report_to": ["wandb", "tensorboard"],
            "betas": (0.9, 0.99),
            "model_init_kwargs": {"torch_dtype": "bfloat16", "trust_remote_code": True},
            "learning_rate": 1e-6,
            "max_steps": 16,
        },
        3,
    )


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("import trl\nargs = trl.GRPOConfig(beta=0.04)", 2),
        ("import trl.trainer.grpo_config as g\n\nargs = g.GRPOConfig(beta=0.04)", 3),
        ("from trl import GRPOConfig as Config\n\n\nConfig(beta=0.04)", 4),
        ("from trl import PPOConfig, GRPOConfig as C\nimport os\nargs = dict(a=C(\n beta=0.04))", 3),
    ],
)
def test_the_constructor_by_attribute_and_alias(text: str, line: int) -> None:
    assert read_python(text, ORIGIN) == ("trl", {"beta": 0.04}, line)


def test_other_calls_and_names_are_not_the_constructor() -> None:
    # an alias of another class is not GRPOConfig; GRPOConfig not called (isinstance) is not a call
    text = """from trl import PPOConfig as GRPOConfigOld, GRPOConfig
print(GRPOConfigOld(beta=1.0), isinstance(x, GRPOConfig), GRPOTrainer(beta=2.0))
args = GRPOConfig(beta=0.5)
"""
    assert read_python(text, ORIGIN) == ("trl", {"beta": 0.5}, 3)


def test_non_literal_values_are_unresolved_with_their_source_text() -> None:
    text = """from trl import GRPOConfig
lr = 1e-6
args = GRPOConfig(
    output_dir=f"{model}-grpo",
    learning_rate=lr,
    loss_type=LOSS.lower(),
    epsilon=0.1 +  0.1,
    num_generations=os.environ["G"],
    beta=--1,
    logging_dir=cfg.logs,
    epsilon_high=[x for x in (1, 2)],
    model_init_kwargs={[1]: 2},
)
"""
    _, settings_read, _ = read_python(text, ORIGIN)
    texts = {name: value.text for name, value in settings_read.items() if isinstance(value, Unresolved)}
    assert texts == {
        "output_dir": "f'{model}-grpo'",
        "loss_type": "LOSS.lower()",
        "num_generations": "os.environ['G']",
        "logging_dir": "cfg.logs",
        "epsilon_high": "[x for x in (1, 2)]",
        "model_init_kwargs": "{[1]: 2}",  # a literal Python refuses when it runs (a list is no key)
    }
    # arithmetic on literals and on names the script assigns once is read as Python computes it
    assert (settings_read["learning_rate"], settings_read["epsilon"], settings_read["beta"]) == (1e-6, 0.2, 1)
    why = settings_read["loss_type"].why
    assert "computed when the script runs" in why and "--set loss_type=VALUE" in why
    assert all(value.at_run for value in settings_read.values() if isinstance(value, Unresolved))


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        # Unsloth's notebooks: the completion's length derived from the sequence's
        ("max_seq_length = 1024\nmax_prompt_length = 256\n", 768),
        ("max_seq_length = 2048 # longer\nmax_prompt_length = 1024 // 4 + 1\n", 1791),
        ("max_seq_length = 1024\nmax_prompt_length = -(-512)\n", 512),
        # a name bound twice, in a loop, by an import or after the call: not known without running it
        ("max_seq_length = 1024\nmax_seq_length = 2048\nmax_prompt_length = 256\n", None),
        ("max_seq_length = 1024\nmax_prompt_length = 256\nfor max_prompt_length in (1, 2): pass\n", None),
        ("from cfg import max_seq_length\nmax_prompt_length = 256\n", None),
        ("max_seq_length = 1024\nmax_prompt_length = 256\nmax_prompt_length += 1\n", None),
        ("max_seq_length = 1024\nmax_prompt_length = len(prompts)\n", None),
        (
            "max_seq_length = 1024\nmax_prompt_length = 0\nif True:\n    max_seq_length2 = max_seq_length\n",
            1024,
        ),
        ("max_seq_length = 1024\nmax_prompt_length = max_seq_length - max_prompt_length\n", None),
        ("max_seq_length = '1024'\nmax_prompt_length = 256\n", None),
        ("max_seq_length = 10**400\nmax_prompt_length = 256\n", None),
    ],
)
def test_a_length_the_script_computes_from_its_constants_is_read(source: str, expected: int | None) -> None:
    text = (
        "from unsloth import FastLanguageModel\nfrom trl import GRPOConfig\n"
        + source
        + "args = GRPOConfig(max_completion_length=max_seq_length - max_prompt_length, loss_type='grpo')\n"
    )
    _, settings_read, _ = read_python(text, ORIGIN)
    value = settings_read["max_completion_length"]
    if expected is None:
        assert isinstance(value, Unresolved) and value.at_run, value
    else:
        assert value == expected and type(value) is int


def test_a_constant_assigned_after_the_call_is_not_taken() -> None:
    text = "args = GRPOConfig(max_completion_length=n)\nn = 512\n"
    _, settings_read, _ = read_python(text, ORIGIN)
    assert isinstance(settings_read["max_completion_length"], Unresolved)


def test_positional_arguments_are_skipped_and_a_splat_is_kept_as_unresolved() -> None:
    text = 'GRPOConfig("out", *extra, beta=0.0, **overrides, loss_type="grpo", **dict(a=1))'
    trainer, settings_read, line = read_python(text, ORIGIN)
    assert (trainer, line) == ("trl", 1)
    assert list(settings_read) == ["beta", "**overrides", "loss_type", "**dict(a=1)"]
    assert settings_read["beta"] == 0.0 and settings_read["loss_type"] == "grpo"
    splat = settings_read["**overrides"]
    assert isinstance(splat, Unresolved) and splat.text == "**overrides" and "splat" in splat.why


def test_several_calls_are_refused_naming_their_lines() -> None:
    text = "from trl import GRPOConfig as C\na = C(beta=0.0)\n\nb = trl.GRPOConfig(\n beta=0.1)\n"
    assert refusal(text) == (
        "train.py: 2 GRPOConfig(...) calls (lines 2, 4); toyrl checks one: keep one in the file"
    )
    assert "(lines 1, 1)" in refusal("GRPOConfig(beta=GRPOConfig())")


@pytest.mark.parametrize("text", ["", "# GRPOConfig(beta=0.0)\n", "x = 'GRPOConfig(beta=0.0)'", "GRPOConfig"])
def test_no_call_is_refused(text: str) -> None:
    assert refusal(text) == (
        "train.py: no GRPOConfig(...) call in it; toyrl reads a trainer's settings in Python from the "
        "keyword arguments of one"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "args = GRPOConfig(\n    beta=0.0,\n    beta 0.1)\n",
            "train.py: not valid Python (invalid syntax. ",
        ),
        ("GRPOConfig(beta=0.0\n", "train.py: not valid Python ('(' was never closed, line 1)"),
        (
            "x = 1\nGRPOConfig(\n beta=0.0,\n\n beta=0.1)",
            "train.py: not valid Python (keyword argument repeated: beta, line 5)",
        ),
        (
            "GRPOConfig(beta=0.0)\0",
            "train.py: not valid Python (source code string cannot contain null bytes",
        ),
        (
            f"GRPOConfig(max_steps={'9' * 5000})",
            "train.py: not valid Python (Exceeds the limit (4300 digits)",
        ),
        ("GRPOConfig(output_dir='\ud800')", "train.py: not valid Python ('utf-8' codec can't encode"),
    ],
)
def test_invalid_python_is_refused_in_one_line(text: str, message: str) -> None:
    assert refusal(text).startswith(message) and "\n" not in refusal(text)


def test_a_syntax_error_names_its_line() -> None:
    assert refusal("from trl import GRPOConfig\n\nGRPOConfig(beta=)\n").endswith(", line 3)")


@pytest.mark.parametrize(
    "text",
    [
        'GRPOConfig(\n    ...\n    loss_type="dr_grpo",\n    beta=0.0,\n)\n',  # alone on its line
        'GRPOConfig(..., loss_type="dr_grpo", beta=0.0)\n',
        'GRPOConfig(\n    loss_type="dr_grpo",\n    beta=0.0,\n    ...\n)\n',  # after the keywords
    ],
)
def test_documentation_s_elisions_are_left_out_and_said(text: str) -> None:
    """TRL's docs write `...` for the other arguments, which Python refuses among keywords; the
    call is read without them, and the settings they stand for are said to be unread."""
    trainer, read, line = read_python("from trl import GRPOConfig\n" + text, "doc")
    assert (trainer, line) == ("trl", 2)
    assert {key: value for key, value in read.items() if key != "**..."} == {
        "loss_type": "dr_grpo",
        "beta": 0.0,
    }
    assert isinstance(read["**..."], Unresolved) and "elisions" in read["**..."].why


def test_a_snippet_indented_as_a_list_item_is_read() -> None:
    text = "   from trl import GRPOConfig\n\n   args = GRPOConfig(\n       ...,\n       beta=0.1,\n   )\n"
    trainer, read, line = read_python(text, "doc")
    assert (trainer, line, read["beta"]) == ("trl", 3, 0.1) and "**..." in read


def test_an_error_beside_an_elision_is_told_as_written() -> None:
    with pytest.raises(InvalidInput, match=r"^doc: not valid Python \(.*line 3\)$"):
        read_python('GRPOConfig(\n    ...\n    loss_type="dr_grpo" beta=0.0,\n)\n', "doc")


def test_an_escape_python_warns_about_is_read_when_warnings_are_errors() -> None:
    # "\\d" is a SyntaxWarning (a DeprecationWarning before 3.12); under -W error, a SyntaxError
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert read_python('GRPOConfig(output_dir="runs\\d")', ORIGIN)[1] == {"output_dir": "runs\\d"}


def test_an_integer_python_cannot_show_is_refused_naming_the_setting() -> None:
    huge = "0x" + "f" * 4000  # 4,816 decimal digits: parsed, but no repr
    assert refusal(f"\nGRPOConfig(max_steps={huge})") == (
        "train.py, line 2: max_steps: an integer of more than 4,300 digits"
    )
    assert refusal(f"GRPOConfig(max_steps={huge} + n)").startswith("train.py, line 1: max_steps: an integer")
    assert refusal(f"GRPOConfig(**f({huge}))").startswith("train.py, line 1: **: an integer")


@pytest.mark.parametrize(
    "value",
    [
        "-" * 100_000 + "1",  # the parser's stack (MemoryError in 3.11)
        "x." * 100_000 + "y",  # RecursionError building the tree
        "-" * 2_000 + "1",  # parsed; unparse (of a non-literal) recurses too deeply
        "(" * 300 + "1" + ")" * 300,  # the parser's limit on brackets: a SyntaxError
    ],
)
def test_deep_nesting_is_refused_in_one_line(value: str) -> None:
    message = refusal(f"GRPOConfig(beta={value})")
    assert message.startswith("train.py: ") and "nested" in message and "\n" not in message


# The result feeds resolve as a file's settings (every key read from the file).


def test_a_literal_setting_is_given_to_the_trainer() -> None:
    _, read, _ = read_python('GRPOConfig(loss_type="dr_grpo", scale_rewards="none", beta=0.0)', ORIGIN)
    resolved = resolve("trl", None, read, frozenset(read))
    assert resolved.given == {"loss_type": "dr_grpo", "scale_rewards": "none", "beta": 0.0}
    assert resolved.mapping.spec.startswith("advantage=none,aggregation=seq_mean_token_sum_norm")


def test_a_computed_setting_toyrl_reads_is_checked_with_its_default_and_named() -> None:
    """As a script's variable it never assigns: the check takes the release's default in its place
    and says so (exit status 1), rather than refuse a script for one value it computes."""
    _, read, _ = read_python("GRPOConfig(output_dir=out, loss_type=LOSS)", ORIGIN)
    resolved = resolve("trl", None, read, frozenset(read))
    assert "loss_type" not in resolved.given and resolved.values["loss_type"] == "dapo"
    assert resolved.unknown == {
        "loss_type": "loss_type=LOSS: computed when the script runs (not a literal, nor arithmetic on names "
        "the script assigns once to one); give it with --set loss_type=VALUE"
    }


def test_a_non_literal_setting_toyrl_does_not_read_is_only_listed() -> None:
    _, read, _ = read_python('GRPOConfig(output_dir=f"{model}-grpo", loss_type="grpo")', ORIGIN)
    resolved = resolve("trl", None, read, frozenset(read))
    assert resolved.ignored == ["output_dir"] and resolved.given == {"loss_type": "grpo"}


# Any source: settings or one line, never a traceback.

NAMES = st.sampled_from(["loss_type", "beta", "epsilon", "output_dir", "if", "lambda", "x1", "_", "beta"])
VALUES = st.sampled_from(
    [
        '"dr_grpo"',
        "'grpo'",
        "0.2",
        "-1e-6",
        "True",
        "None",
        "[1, (2, 3), {'a': None}]",
        "{[1]: 2}",
        "{1, 2}",
        "lr",
        'f"{m}-x"',
        "a.b(c)",
        "1 +",
        "((1)",
        "0x" + "f" * 4000,
        "9" * 5000,
        "-" * 3000 + "1",
        "[" * 150 + "]" * 150,
        '"""a\nb"""',
        "lambda: 0",
        "...",
        "b'x'",
    ]
)
ARGUMENT = st.one_of(
    st.tuples(NAMES, VALUES).map(lambda pair: f"{pair[0]}={pair[1]}"),
    VALUES,
    VALUES.map(lambda value: f"**{value}"),
    st.text(alphabet=string.printable, max_size=8),
)


@st.composite
def snippets(draw: Any) -> str:
    """Python-ish source: imports, calls of GRPOConfig (or an alias, or trl.GRPOConfig) with random
    arguments, random text between them, and the whole cut anywhere."""
    parts = draw(
        st.lists(
            st.one_of(
                st.sampled_from(
                    ["from trl import GRPOConfig as C\n", "import trl\n", "x = 1\n", "\n", "    ", "#"]
                ),
                st.tuples(
                    st.sampled_from(["GRPOConfig", "C", "trl.GRPOConfig", "f"]), st.lists(ARGUMENT)
                ).map(lambda call: f"{call[0]}({', '.join(call[1])})\n"),
                st.text(max_size=10),
            ),
            max_size=5,
        )
    )
    text = "".join(parts)
    return text[: draw(st.integers(0, len(text)))]


@settings(max_examples=150, deadline=None)
@given(text=snippets())
def test_random_source_is_read_or_refused_in_one_line(text: str) -> None:
    try:
        trainer, read, line = read_python(text, ORIGIN)
    except InvalidInput as error:
        message = str(error)
        assert message.startswith(ORIGIN) and "\n" not in message, message
        return
    assert trainer == "trl" and line >= 1 and line <= text.count("\n") + 1
    for value in read.values():
        if isinstance(value, Unresolved):
            assert "\n" not in value.text and value.text.strip(), value
