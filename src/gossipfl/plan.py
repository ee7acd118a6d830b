"""What a run will hold in memory, state by state, before anything of size M is allocated
(``gossipfl run --dry-run``; benchmarks/scale.py compares it with the measured peak).

The model is the one measured on a single process (benchmarks/scale.py, docs/benchmarks.md):
a round of a decentralized algorithm holds, beside each client_state entry of ``[M, P]``
float32 (and the initial stack X⁰ when ``init_params`` gives one per client), the trained models Y, the gossip output W Y and one more
transient ``[M, P]`` (the gradient of a block, or x − x̄ of the consensus distance); the
topology its edges; the process itself the interpreter, torch and the dataset.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Resident bytes of the interpreter with torch and gossipfl imported (measured on CPU, Linux,
#: torch 2.x: 0.40-0.45 GiB), before any data.
PROCESS_BYTES = 450 * 2**20
FLOAT_BYTES = 4
ROUND_COPIES = 3  # trained models Y, the gossip output W Y, one transient [M, P]


@dataclass
class Line:
    what: str
    per_client: float  # bytes per client (0: shared)
    total: float  # bytes


def memory_plan(config) -> tuple[list[Line], dict]:
    """The lines of the run's memory (per client and total) and facts (M, P, ...), from the
    config; reads the dataset and builds one model (no [M, P] stack, no topology)."""
    from gossipfl.algorithms import get_algorithm
    from gossipfl.data import load_dataset
    from gossipfl.engine import ParamLayout
    from gossipfl.experiment import KEEP_FREED_MAX_BYTES, LOCAL_CLIENTS_AUTO, build_model_for
    from gossipfl.topology.graphs import SPARSE_TOPOLOGIES, edge_bytes
    from gossipfl.topology.sparse import DENSE_MAX_CLIENTS

    data = config.data
    m = int(data.clients)
    dataset = load_dataset(data.dataset, root=data.root, download=data.download,
                           verify=data.verify, **data.options)
    if m > len(dataset.train_y):
        from gossipfl.errors import GossipflError

        raise GossipflError(f"data.clients: {m} clients but the dataset has only "
                            f"{len(dataset.train_y)} training samples.")
    P = ParamLayout.from_module(build_model_for(config, dataset)).P
    algo = get_algorithm(config.algorithm.name)
    row = FLOAT_BYTES * P
    lines = [Line(f"client_state {key} [M, P]", row, row * m) for key in algo.client_state]
    if config.init_params is not None:  # the same initial model everywhere is one row
        lines.append(Line("initial models X⁰ [M, P]", row, row * m))
    lines.append(Line(f"a round's working copies ({ROUND_COPIES} × [M, P])",
                      ROUND_COPIES * row, ROUND_COPIES * row * m))
    topo = config.topology
    if not algo.centralized:
        params = {"k": topo.k, "s": topo.s, "p": topo.p}
        sparse = topo.name in SPARSE_TOPOLOGIES and not (
            topo.name == "erdos_renyi" and topo.p >= 1 / 3)  # then dense (graphs._erdos_renyi)
        if m > DENSE_MAX_CLIENTS and sparse:
            edges = edge_bytes(topo.name, m, params)
            lines.append(Line(f"topology {topo.name} as edges (building peak)", edges / m,
                              edges))
        else:
            lines.append(Line(f"topology {topo.name} dense [M, M] float64 (W and A)",
                              16 * m, 16 * m * m))
    n = len(dataset.train_y)
    lines.append(Line("client data (index arrays)", 8 * n / m, 8 * n))
    data_bytes = sum(t.numel() * t.element_size()
                     for t in (dataset.train_x, dataset.train_y, dataset.test_x, dataset.test_y))
    lines.append(Line("dataset (shared)", 0, data_bytes))
    lines.append(Line("process (python, torch, gossipfl)", 0, PROCESS_BYTES))
    sampled = config.eval.local_clients
    if sampled is None and m > LOCAL_CLIENTS_AUTO:
        sampled = LOCAL_CLIENTS_AUTO
    facts = {"clients": m, "P": P, "algorithm": algo.name,
             "keep_freed_memory": bool(config.engine.keep_freed_memory)
             and FLOAT_BYTES * m * P <= KEEP_FREED_MAX_BYTES,
             "eval_clients": sampled if sampled is not None and sampled < m else None}
    return lines, facts


def estimate_bytes(config) -> float:
    """The peak resident bytes the run is expected to reach."""
    return float(sum(line.total for line in memory_plan(config)[0]))


def format_plan(lines: list[Line], facts: dict) -> str:
    from gossipfl.results.reporting import format_bytes

    head = (f"memory plan: {facts['algorithm']}, {facts['clients']} clients, "
            f"P = {facts['P']} parameters")
    out = [head]
    width = max(len(line.what) for line in lines)
    out.append(f"  {'state':<{width}}  {'per client':>12}  {'total':>12}")
    for line in lines:
        per = format_bytes(int(np.ceil(line.per_client))) if line.per_client else "shared"
        out.append(f"  {line.what:<{width}}  {per:>12}  {format_bytes(int(line.total)):>12}")
    total = sum(line.total for line in lines)
    per_client = sum(line.per_client for line in lines)
    out.append(f"  {'total (expected peak)':<{width}}  "
               f"{format_bytes(int(np.ceil(per_client))):>12}  {format_bytes(int(total)):>12}")
    if facts.get("keep_freed_memory"):
        out.append("  with engine.keep_freed_memory (on at this size) glibc keeps freed "
                   "blocks: the peak can exceed this by the heap's fragmentation")
    if facts.get("eval_clients"):
        out.append(f"  local models evaluated on a sample of {facts['eval_clients']} clients "
                   "(eval.local_clients)")
    return "\n".join(out)
