"""gossipfl: decentralized federated learning research simulator.

All M clients live in one ``[M, P]`` tensor; gossip is a matrix product; algorithms are a few
lines of tensor algebra over that stack. Entry points (:mod:`gossipfl.api`): :func:`run`,
:func:`sweep`, :func:`report`, :func:`stability`, :func:`analyze`, :func:`fetch`, and the
results as DataFrames, :func:`load_run` and :func:`load_study`.
"""

from gossipfl.errors import GossipflError

__version__ = "0.1.0"

#: Imported from gossipfl.api on first use (``import gossipfl`` stays light: the CLI starts
#: without torch).
_API = ("Report", "Result", "StudyResults", "analyze", "fetch", "load_run", "load_study",
        "partition_summary", "report", "run", "stability", "sweep")
__all__ = ["GossipflError", "Report", "Result", "StudyResults", "__version__", "analyze",
           "fetch", "load_run", "load_study", "partition_summary", "report", "run",
           "stability", "sweep"]


def __getattr__(name: str):
    if name in _API:
        from gossipfl import api

        return getattr(api, name)
    raise AttributeError(name)

