"""Stand-in for skyrl_gym.envs.sql.env's `Text2SQLEnvConfig` (see the package's docstring): a dataclass
without fields, the default of a SkyRLGymConfig field the conformance tests never read."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Text2SQLEnvConfig:
    pass
