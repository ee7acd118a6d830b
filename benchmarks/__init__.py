"""Speed and memory benchmarks (not tests): run as ``python -m benchmarks.<name> --help``."""
