"""The engine: parameter stack with named views, gradient oracles, batched evaluation."""

from gossipfl.engine.evaluate import evaluate_per_client, evaluate_stack
from gossipfl.engine.factory import auto_oracle, make_oracle
from gossipfl.engine.memory import keep_freed_memory
from gossipfl.engine.oracle import ORACLES, LoopOracle, Oracle, VmapOracle
from gossipfl.engine.params import ParamLayout, init_stack
from gossipfl.engine.stacked import StackedOracle, StackedUnsupported, supports

__all__ = [
    "ORACLES",
    "LoopOracle",
    "Oracle",
    "ParamLayout",
    "StackedOracle",
    "StackedUnsupported",
    "VmapOracle",
    "auto_oracle",
    "evaluate_per_client",
    "evaluate_stack",
    "init_stack",
    "keep_freed_memory",
    "make_oracle",
    "supports",
]
