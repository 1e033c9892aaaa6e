"""Part of the transformers stand-in (see transformers/__init__.py): `transformers.trainer`.
oat calls `get_scheduler` to build learning-rate schedules when a learner is initialised
(oat.learners.base, oat.learners.rl); the tests build no learner that way and step no scheduler.
"""

from _oat_standin import standin_function

get_scheduler = standin_function("transformers.trainer", "get_scheduler")
