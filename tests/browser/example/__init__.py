"""The shop whose runs the console's browser test shows; ``app`` is copied to a neutral
directory and run from there (tests/browser/conftest.py, ``shop``)."""
