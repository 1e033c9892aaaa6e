"""Stand-in for pyarrow, for `pyarrow.plasma` only: the Plasma shared-memory object store through
which oat's actors hand trajectories to the learner (oat.utils.ipc). Plasma left pyarrow in 12.0,
and the pyarrow releases that have it (oat pins pyarrow < 12) do not run with numpy 2; the tests
hand the batch to the learner directly, so Plasma is never called.

pandas imports pyarrow when it can. To pandas this module is a pyarrow too old to use
(`__version__` 0.0.0, below pandas' minimum: pandas.compat.pyarrow's HAS_PYARROW is False), so
pandas runs on its numpy code paths as without pyarrow; the one check pandas makes of any
installed pyarrow whatever its version, isinstance against `Array` and `ChunkedArray`
(pandas._libs.lib.is_pyarrow_array), is false for every object, as these two classes have no
instances.
"""

from _oat_standin import standin_class

__version__ = "0.0.0"

Array = standin_class("pyarrow", "Array")
ChunkedArray = standin_class("pyarrow", "ChunkedArray")
