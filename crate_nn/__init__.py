"""crate_nn: the production PyTorch CRATE (row convention, x is (batch, tokens, dim))."""
