"""harness: propose, build, check and time custom kernels against a PyTorch reference."""

__version__ = "0.1.0"
