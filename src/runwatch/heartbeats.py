"""`runwatch.heartbeats`, kept where earlier docs and code import it: the per-rank heartbeat
files (`runwatch.files.heartbeats`) and the rank rules that judge them (`runwatch.judging.ranks`).
Everything they export is re-exported here."""

from .files.heartbeats import *  # noqa: F403
from .files.heartbeats import __all__ as _files_all
from .judging.ranks import *  # noqa: F403
from .judging.ranks import __all__ as _ranks_all

__all__ = [*_files_all, *_ranks_all]
