"""Stand-in for skyrl_gym.envs.search.env's `SearchEnvConfig` (see the package's docstring): a dataclass
without fields, the default of a SkyRLGymConfig field the conformance tests never read."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class SearchEnvConfig:
    pass
