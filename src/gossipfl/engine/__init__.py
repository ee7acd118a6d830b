"""The engine: parameter stack with named views, gradient oracles, batched evaluation."""

from gossipfl.engine.evaluate import evaluate_per_client, evaluate_stack
from gossipfl.engine.oracle import LoopOracle, Oracle, VmapOracle, make_oracle
from gossipfl.engine.params import ParamLayout, init_stack

__all__ = [
    "LoopOracle",
    "Oracle",
    "ParamLayout",
    "VmapOracle",
    "evaluate_per_client",
    "evaluate_stack",
    "init_stack",
    "make_oracle",
]
