"""Part of the pyarrow stand-in (see pyarrow/__init__.py): `pyarrow.plasma`, the shared-memory store
(`connect`, `start_plasma_store`, `ObjectID`) of oat.utils.ipc, used between actor and learner
processes; the tests start no such process. Any attribute use fails.
"""
