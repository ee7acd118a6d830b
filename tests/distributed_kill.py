"""Test plugin: DFedAvg whose rank ``GOSSIPFL_TEST_KILL_RANK`` is killed (SIGKILL, as an
out-of-memory killer or a lost node would) at the start of round ``GOSSIPFL_TEST_KILL_ROUND``
(0-based) — or, with ``GOSSIPFL_TEST_STALL_SECONDS``, stalls that long instead (a hung rank).
Without those variables it is plain DFedAvg, so a resumed run does not die."""

from __future__ import annotations

import os
import signal
import time

from gossipfl.algorithms import register
from gossipfl.algorithms.decentralized.dfedavg import DFedAvg


@register
class KilledDFedAvg(DFedAvg):
    name = "test_killed_dfedavg"

    def begin_round(self, ctx, state):
        rank, when = os.environ.get("GOSSIPFL_TEST_KILL_RANK"), os.environ.get(
            "GOSSIPFL_TEST_KILL_ROUND")
        if rank == os.environ.get("RANK") and when is not None and ctx.round == int(when):
            stall = os.environ.get("GOSSIPFL_TEST_STALL_SECONDS")
            if stall is None:
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(float(stall))
        return super().begin_round(ctx, state)
