"""Part of the transformers stand-in (see transformers/__init__.py): `transformers.models`, a
package only traversed to reach `deberta_v2`.
"""
