"""Stand-in for Hugging Face datasets: oat loads prompt data sets with `datasets.load_dataset` /
`load_from_disk` (oat.utils.data); the tests' data are toy batches made in the test, so neither is
called. Any attribute use fails.
"""
