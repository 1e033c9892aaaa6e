"""Stand-in for `skyrl_gym` (SkyRL's environments), for SkyRL's conformance environment only.

skyrl/train/config/config.py, which ppo_utils imports for `AlgorithmConfig`, imports two
environment configuration dataclasses from skyrl_gym (`SearchEnvConfig`, `Text2SQLEnvConfig`) to
give `SkyRLGymConfig` its defaults; the conformance tests build only `AlgorithmConfig`, which
never reads them. skyrl-gym's environment modules import their tools' clients (a search
retriever, SQL drivers), which the tests never run. The two stand-in dataclasses
(envs/search/env.py, envs/sql/env.py) have no fields and are never read.
"""
