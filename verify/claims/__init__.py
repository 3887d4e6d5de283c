"""The claims, one module per group of the papers' statements (every module here is loaded by the registry)."""
