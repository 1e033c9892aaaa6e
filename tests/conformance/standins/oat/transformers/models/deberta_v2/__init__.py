"""Part of the transformers stand-in (see transformers/__init__.py): `transformers.models.deberta_v2`,
a package only traversed to reach `modeling_deberta_v2`.
"""
