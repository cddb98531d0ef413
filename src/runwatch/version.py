"""runwatch's version, in one place (pyproject.toml carries the same; a test keeps them equal)."""

__version__ = "0.1.0"
