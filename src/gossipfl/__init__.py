"""gossipfl: decentralized federated learning research simulator.

All M clients live in one ``[M, P]`` tensor; gossip is a matrix product; algorithms are a few
lines of tensor algebra over that stack. Entry point: :func:`gossipfl.run`.
"""

from gossipfl.errors import GossipflError

__version__ = "0.1.0"
__all__ = ["GossipflError", "Result", "__version__", "partition_summary", "run", "stability"]


def __getattr__(name: str):
    if name in ("run", "Result", "partition_summary", "stability"):
        from gossipfl import api

        return getattr(api, name)
    raise AttributeError(name)
