"""What a run will hold in memory, state by state, before anything of size M is allocated
(``gossipfl run --dry-run``; benchmarks/scale.py compares it with the measured peak).

The model is the one measured on a single process (benchmarks/scale.py, docs/benchmarks.md):
a round of a decentralized algorithm holds, beside each client_state entry of ``[M, P]``
float32 (and the initial stack X⁰ when ``init_params`` gives one per client), the trained models Y, the gossip output W Y and one more
transient ``[M, P]`` (the gradient of a block, or x − x̄ of the consensus distance); the
topology its edges; the process itself the interpreter, torch and the dataset.

:func:`check_plan` enforces it: before the run allocates its ``[M, P]`` stacks the plan's
total is compared with what this process may hold (:func:`memory_budget`: what it holds now
plus Linux's MemAvailable, the address-space limit, the cgroup's limit, shared by the ranks of
a torchrun job on this machine), and a plan that cannot fit is refused in one sentence naming
the settings that would make it fit.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gossipfl.errors import GossipflError

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
    grows: int = 0  # the total grows as M**grows (0: independent of the number of clients)
    key: str = "data.clients"  # the setting that sizes it (where a refusal points)
    per_rank: bool = False  # split over the ranks of a distributed run (rows of [M, P])


def memory_plan(config, dataset=None, P: int | None = None) -> tuple[list[Line], dict]:
    """The lines of the run's memory (per client and total) and facts (M, P, ...), from the
    config; reads the dataset and builds one model (no [M, P] stack, no topology) unless
    ``dataset`` and ``P`` are given (the run's own, :func:`check_plan`)."""
    from gossipfl.algorithms import get_algorithm
    from gossipfl.assembly.experiment import (
        KEEP_FREED_MAX_BYTES,
        LOCAL_CLIENTS_AUTO,
        build_model_for,
    )
    from gossipfl.engine import ParamLayout
    from gossipfl.topology.graphs import topology_bytes

    data = config.data
    m = int(data.clients)
    if dataset is None:
        from gossipfl.assembly.experiment import build_data

        dataset = build_data(config)[0]  # its size checks, then the data
    if P is None:
        P = ParamLayout.from_module(build_model_for(config, dataset)).P
    algo = get_algorithm(config.algorithm.name)
    row = FLOAT_BYTES * P
    lines = [Line(f"client_state {key} [M, P]", row, row * m, 1, per_rank=True)
             for key in algo.client_state]
    if config.init_params is not None:  # the same initial model everywhere is one row
        lines.append(Line("initial models X⁰ [M, P]", row, row * m, 1, "init_params", True))
    lines.append(Line(f"a round's working copies ({ROUND_COPIES} × [M, P])",
                      ROUND_COPIES * row, ROUND_COPIES * row * m, 1, per_rank=True))
    topo = config.topology
    if not algo.centralized:  # what build_topology checks before it builds
        needed, as_edges = topology_bytes(topo.name, m, topo.parameters())
        if as_edges:
            lines.append(Line(f"topology {topo.name} as edges (building peak)", needed / m,
                              needed, 1, "topology.name"))
        else:
            lines.append(Line(f"topology {topo.name} dense [M, M] float64 (W and A)",
                              needed / m, needed, 2, "topology.name"))
    n = len(dataset.train_y)
    lines.append(Line("client data (index arrays)", 8 * n / m, 8 * n, key="data.dataset"))
    size = data.local_test_size
    personalized = config.eval.personalized or "personalized" in algo.evaluations
    if size is not None and personalized and len(dataset.test_y):
        lines.append(Line(f"local test splits ({size} samples a client, int64)",
                          16 * size, 8 * (2 * m + 4) * size, 1, "data.local_test_size"))
    data_bytes = sum(t.numel() * t.element_size()
                     for t in (dataset.train_x, dataset.train_y, dataset.test_x, dataset.test_y))
    lines.append(Line("dataset (shared)", 0, data_bytes, key="data.dataset"))
    lines.append(Line("process (python, torch, gossipfl)", 0, PROCESS_BYTES, key=""))
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


def format_bytes(value: float | None) -> str:
    """Bytes in decimal units (``1.25 GB``), as the plan and the reports print them."""
    if value is None:
        return "—"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if value >= size:
            return f"{value / size:.2f} {unit}"
    return f"{value:.0f} B"


def format_plan(lines: list[Line], facts: dict) -> str:
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


# --------------------------------------------------------------------------------------------
# The plan enforced: what this process may hold
# --------------------------------------------------------------------------------------------
#: Bytes (or 512M, 24G, 1.5T) this process may use in all, in place of the machine's reading
#: (a machine whose reading is wrong; the tests).
MEMORY_ENV = "GOSSIPFL_MEMORY_AVAILABLE"
_UNLIMITED = 2 ** 60  # a cgroup limit above this is "max"


@dataclass
class Budget:
    """What this process may hold: ``held`` now plus ``available`` more, of which a torchrun
    job's ``sharing`` ranks on this machine each get an equal part; ``source`` says what bounds
    it (MemAvailable, the cgroup limit, ...)."""

    held: int
    available: int
    source: str
    sharing: int = 1

    @property
    def limit(self) -> int:
        return self.held + self.available // self.sharing


def memory_budget() -> Budget | None:
    """This process's memory budget on the CPU (None when nothing can be read)."""
    from gossipfl.engine.memory import available_memory, processes_sharing

    held = resident_bytes()
    sharing = processes_sharing("cpu")
    given = os.environ.get(MEMORY_ENV)
    if given:
        return Budget(0, parse_bytes(given, MEMORY_ENV), MEMORY_ENV, sharing)
    readings = [(available_memory("cpu"), "MemAvailable"),
                (cgroup_memory_left(), "the cgroup's memory limit")]
    known = [(value, source) for value, source in readings if value is not None]
    if not known:
        return None
    value, source = min(known)
    return Budget(held, value, source, sharing)


def parse_bytes(text: str, key: str) -> int:
    """``"1073741824"``, ``"512M"``, ``"24G"`` or ``"1.5T"`` (binary units) as bytes."""
    units = {"": 1, "K": 2 ** 10, "M": 2 ** 20, "G": 2 ** 30, "T": 2 ** 40}
    body = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = body[-1:] if body[-1:] in units and body[-1:] else ""
    try:
        value = float(body[:len(body) - len(unit)])
    except ValueError:
        value = -1
    if not 0 <= value * units[unit] < 2 ** 63:  # also NaN, an infinity, 1e400
        raise GossipflError(f"{key}: expected bytes such as 1073741824, 512M or 24G, "
                            f"got {text!r}.")
    return int(value * units[unit])


def resident_bytes() -> int:
    """The memory this process holds now (its resident set; 0 when unknown)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def cgroup_memory_left(root: Path = Path("/sys/fs/cgroup"),
                       membership: Path = Path("/proc/self/cgroup")) -> int | None:
    """What the process's cgroup may still charge: its limit (v2 ``memory.max``, v1
    ``memory.limit_in_bytes``) less its usage without the reclaimable page cache
    (``inactive_file``); None without a limit."""
    try:
        lines = membership.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _id, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controllers == "":  # v2: one unified hierarchy
            names, folders = ("memory.max", "memory.current", "inactive_file"), \
                [root / path.lstrip("/"), root]
        elif "memory" in controllers.split(","):  # v1: the memory controller's hierarchy
            names, folders = ("memory.limit_in_bytes", "memory.usage_in_bytes",
                              "total_inactive_file"), \
                [root / "memory" / path.lstrip("/"), root / "memory"]
        else:
            continue
        for folder in folders:
            left = _cgroup_left(folder, *names)
            if left is not None:
                return left
    return None


def _cgroup_left(folder: Path, limit_file: str, usage_file: str, cache_key: str) -> int | None:
    try:
        text = (folder / limit_file).read_text().strip()
        usage = int((folder / usage_file).read_text().strip())
    except (OSError, ValueError):
        return None
    if text == "max" or not text.isdigit() or int(text) >= _UNLIMITED:
        return None
    cache = 0
    try:
        for line in (folder / "memory.stat").read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == cache_key:
                cache = int(value)
    except (OSError, ValueError):
        pass
    return max(int(text) - max(usage - cache, 0), 0)


def fits(lines: list[Line], budget: Budget | None, ranks: int = 1) -> bool:
    return budget is None or planned_bytes(lines, ranks) <= budget.limit


def planned_bytes(lines: list[Line], ranks: int = 1, clients: int | None = None,
                  m: int | None = None) -> float:
    """The plan's total for one of ``ranks`` processes (rows of [M, P] split over them); with
    ``clients``, rescaled from ``m`` clients to that many."""
    total = 0.0
    for line in lines:
        value = line.total
        if clients is not None and m and line.grows:
            value *= (clients / m) ** line.grows
        total += value / ranks if line.per_rank else value
    return total


def check_plan(config, dataset, P: int, ranks: int = 1) -> None:
    """Refuse, in one sentence, a run whose memory plan exceeds what this process may hold,
    naming what would make it fit (fewer clients, a graph built as edges, a smaller local
    test split, a smaller model)."""
    lines, facts = memory_plan(config, dataset, P)
    budget = memory_budget()
    if fits(lines, budget, ranks):
        return
    raise GossipflError(refusal(lines, facts, budget, ranks))


def refusal(lines: list[Line], facts: dict, budget: Budget, ranks: int = 1) -> str:
    total = planned_bytes(lines, ranks)
    key = max((line for line in lines if line.key), key=lambda line: line.total).key
    whose = "this process's share of the run" if ranks > 1 else "this run"
    held = f"{format_bytes(budget.held)} held now, " if budget.held else ""
    share = (f" shared by the {budget.sharing} processes of this job on this machine"
             if budget.sharing > 1 else "")
    return (f"{key}: the memory plan of {whose} needs {format_bytes(total)} "
            f"(gossipfl run --dry-run lists it), but this process can hold at most "
            f"{format_bytes(budget.limit)} ({held}{format_bytes(budget.available)} "
            f"{budget.source}{share}); it would fit with "
            f"{' or '.join(remedies(lines, facts, budget, ranks))}.")


def remedies(lines: list[Line], facts: dict, budget: Budget, ranks: int = 1) -> list[str]:
    """The settings that would make the plan fit, each alone."""
    from gossipfl.topology.graphs import edge_bytes

    out = []
    m = facts["clients"]
    most = _most_clients(lines, m, budget.limit, ranks)
    if most >= 2:
        out.append(f"at most {most} clients (data.clients)")
    for line in lines:
        if line.key == "topology.name" and line.grows == 2:
            rest = planned_bytes([x for x in lines if x is not line], ranks)
            if rest + edge_bytes("ring", m, {}) <= budget.limit:
                out.append("a graph built as edges (topology.name: ring, exponential, "
                           "epidemic, ...)")
        if line.key == "data.local_test_size":
            rest = planned_bytes([x for x in lines if x is not line], ranks)
            if rest < budget.limit:
                most_size = int((budget.limit - rest) // (8 * (2 * m + 4)))
                if most_size >= 1:
                    out.append(f"data.local_test_size at most {most_size}")
    if not out:
        out.append(f"a smaller model (P = {facts['P']} parameters) on a machine with more "
                   "memory")
    return out


def _most_clients(lines: list[Line], m: int, limit: float, ranks: int) -> int:
    """The largest number of clients whose plan fits ``limit`` (the lines rescaled)."""
    if planned_bytes(lines, ranks, 1, m) > limit:
        return 0
    low, high = 1, m
    while low < high:  # the plan grows with the clients: bisect
        mid = (low + high + 1) // 2
        if planned_bytes(lines, ranks, mid, m) <= limit:
            low = mid
        else:
            high = mid - 1
    return low


def format_fit(lines: list[Line], facts: dict, budget: Budget | None, ranks: int = 1) -> str:
    """``--dry-run``'s last line: that the plan fits this machine (or that it cannot tell);
    a plan that does not fit is the run's refusal (:func:`refusal`), raised."""
    if budget is None:
        return "fits this machine: unknown (its available memory cannot be read)"
    if not fits(lines, budget, ranks):
        raise GossipflError(refusal(lines, facts, budget, ranks))
    return (f"fits this machine: yes ({format_bytes(planned_bytes(lines, ranks))} of at "
            f"most {format_bytes(budget.limit)} by {budget.source})")
