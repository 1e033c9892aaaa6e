"""Stand-in for `ray.util.placement_group` (see `ray/__init__.py`): `PlacementGroup` (an
annotation in `openrlhf.trainer.ray.launcher`) and `placement_group`; both raise if used."""

from _standin import never_called, never_instantiated

PlacementGroup = never_instantiated("ray.util.placement_group.PlacementGroup")
placement_group = never_called("ray.util.placement_group.placement_group")
