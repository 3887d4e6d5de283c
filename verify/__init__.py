"""verify: the derivation audit of the CRATE papers (``python -m verify``)."""
