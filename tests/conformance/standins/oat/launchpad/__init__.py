"""Stand-in for DeepMind's Launchpad (`launchpad`, dm-launchpad): the program launcher that runs
oat's actors, learner and shared-memory server as processes. oat calls `lp.stop()` and builds
programs (oat.interface, oat.learners.base, oat.utils.ipc); the tests run one learning step in
this process and launch nothing. Any attribute use fails.
"""
