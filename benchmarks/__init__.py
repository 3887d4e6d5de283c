"""Speed and memory benchmarks (``python -m benchmarks.<name>``)."""
