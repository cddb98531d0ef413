"""`runwatch.records`, kept where earlier docs and code import it: the one record parser and the reading of any target
(`runwatch.reading.records`, where it lives now). Everything it exports is re-exported here."""

from .reading.records import *  # noqa: F403
from .reading.records import __all__ as __all__
