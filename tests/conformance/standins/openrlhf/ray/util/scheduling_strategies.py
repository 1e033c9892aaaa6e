"""Stand-in for `ray.util.scheduling_strategies` (see `ray/__init__.py`):
`PlacementGroupSchedulingStrategy`, imported by the launcher and the vLLM engine; raises if used."""

from _standin import never_instantiated

PlacementGroupSchedulingStrategy = never_instantiated(
    "ray.util.scheduling_strategies.PlacementGroupSchedulingStrategy"
)
