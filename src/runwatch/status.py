"""`runwatch.status`, kept where earlier docs and code import it: one short check-in on a run
(`runwatch.views.status`, where it lives now). Everything it exports is re-exported here."""

from .views.status import *  # noqa: F403
from .views.status import __all__ as __all__
