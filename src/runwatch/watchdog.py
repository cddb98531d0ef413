"""`runwatch.watchdog`, kept where earlier docs and code import it: the watch and its replay
(`runwatch.judging.watchdog`, where it lives now). Everything it exports is re-exported here."""

from .judging.watchdog import *  # noqa: F403
from .judging.watchdog import __all__ as __all__
