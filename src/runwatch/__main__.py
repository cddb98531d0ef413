"""`python -m runwatch` is the `runwatch` command."""

import sys

from .cli import main

sys.exit(main())
