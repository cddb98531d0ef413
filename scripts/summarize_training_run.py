#!/usr/bin/env python3
"""Standalone acceptance summary of a runwatch run directory (docs/FORMAT.md, "The acceptance summary").

    python -S scripts/summarize_training_run.py RUN_DIR [--after-step N] [--expect-step N]

Needs only the standard library and this repository's `src/` tree; runs from any directory.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), os.pardir, "src"))

from runwatch.judging.summary import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
