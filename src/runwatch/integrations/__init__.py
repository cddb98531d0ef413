"""Framework integrations: thin callbacks that translate a framework's hooks into `RunLogger` calls.

    from runwatch.integrations.hf import RunwatchCallback          # transformers Trainer
    from runwatch.integrations.lightning import RunwatchCallback   # Lightning Trainer

This package imports nothing at import time; each submodule imports its framework (install the
`[hf]` or `[lightning]` extra). What they share, framework-neutral, is in `session.py`.
"""

__all__: list[str] = []
