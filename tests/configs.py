"""The small configurations the tests share: one place, not one a file.

`SMALL` is a short run (12 steps of 4 prompts' groups), for tests of behaviour: bytes written,
determinism, sweeps, plugins, stages along training. `TINY` is small enough to enumerate every batch
a step can draw (3 prompts, 2 a batch, groups of 2, lengths up to 3), for exact expectations. The
exact tests that need another size share the named ones below; a test of one file takes a named
variant (`TINY.replace(...)`) and says why beside it.
"""

from toyrl.config import Config

SMALL = Config(steps=12, prompts=8, batch_prompts=4)
TINY = Config(prompts=3, batch_prompts=2, group_size=2, cap=3, min_length=2)
# The exact update against every batch enumerated, for stages of a whole group: one group of three a
# batch (two prompts), lengths up to 4, an L_norm apart from the cap.
ONE_GROUP = TINY.replace(prompts=2, batch_prompts=1, group_size=3, cap=4, length_norm=5.0)
# The exact update against the mean of 100,000 sampled ones: batches of several groups, lengths up
# to 50 (the window 5..50), so that the sampled updates are cheap.
SAMPLED = Config(prompts=6, batch_prompts=3, group_size=4, cap=50, min_length=5)


def settings(config: Config) -> dict[str, object]:
    """`config`'s fields that differ from the defaults, as `toyrl.run(..., **settings)` takes them."""
    default = Config().to_dict()
    return {name: value for name, value in config.to_dict().items() if value != default[name]}


def options(config: Config) -> list[str]:
    """The command-line options that make `config` from the defaults (`--batch-prompts 4`, ...)."""
    return [
        word
        for name, value in settings(config).items()
        for word in (f"--{name.replace('_', '-')}", str(value))
    ]
