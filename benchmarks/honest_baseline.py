"""gossipfl against the best plain per-client loop, in the seed papers' own settings, each in its
own process, under both OpenMP wait policies (issue 39, part 2).

The reference is what a careful researcher writes without gossipfl (our own code): one
``nn.Module`` per client, its ``DataLoader`` built once and reused every round (a reshuffle per
epoch), ``torch.optim.SGD`` with the papers' weight decay and momentum (a new optimizer per
client and round: DFedAvgM resets its momentum every round, as gossipfl's definition says),
SAM's two passes for DFedSAM, and the gossip x_i ← Σ_j w_ij y_j over each client's neighbours
only, parameter by parameter, under ``torch.no_grad``; the average model evaluated every
round, as research code does. It runs as its users run it: torch's defaults, one process.

Cases (Fashion-MNIST, 100 clients iid, MLP 784-200-200-10, one local epoch of 600 samples,
batch 32, lr 0.1, ring, Metropolis–Hastings weights):

- ``dfedavg``: DFedAvg with weight decay 5e-4 (the papers' setting);
- ``dfedavgm``: DFedAvgM, momentum 0.9, weight decay 5e-4;
- ``dfedsam``: DFedSAM, ρ = 0.05 (gossipfl's default), weight decay 5e-4;
- ``dfedavg_plain``: DFedAvg without weight decay (the README's earlier headline setting).

Every (case, implementation, OMP_WAIT_POLICY) runs in a fresh process: one warm-up round, then
``--rounds`` timed rounds; the processes are interleaved (all combinations once, then again,
``--reps`` times), so that a slow minute of the machine hits every side. The ratio is
reference / gossipfl for each pairing of policies; the conservative one pairs the reference's
fastest policy with gossipfl's slowest.

    python -m benchmarks.honest_baseline                        # ~10 min on 2 cores
    python -m benchmarks.honest_baseline --cases dfedavg --reps 1 --rounds 1   # a quick look

Prints a Markdown table and writes every round as a JSON line (``--out``).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

CASES = {
    "dfedavg": ({"name": "dfedavg"}, 5e-4),
    "dfedavgm": ({"name": "dfedavgm", "momentum": 0.9}, 5e-4),
    "dfedsam": ({"name": "dfedsam", "rho": 0.05}, 5e-4),
    "dfedavg_plain": ({"name": "dfedavg"}, 0.0),
}
IMPLEMENTATIONS = ("gossipfl", "reference")
POLICIES = ("default", "PASSIVE")


def case_config(case: str, clients: int):
    from gossipfl.assembly.loading import load_config

    algorithm, wd = CASES[case]
    return load_config({
        "data": {"dataset": "fashion_mnist", "clients": clients, "partition": "iid"},
        "model": {"name": "mlp", "options": {"hidden": [200, 200]}},
        "topology": {"name": "ring"}, "algorithm": algorithm,
        "train": {"rounds": 1, "local_epochs": 1, "batch_size": 32, "lr": 0.1,
                  "weight_decay": wd},
        "eval": {"local_models": False},
    })


# --------------------------------------------------------------------------------------------
# The careful per-client loop
# --------------------------------------------------------------------------------------------
class CarefulLoop:
    """One module, one reusable DataLoader per client; DFedAvg / DFedAvgM / DFedSAM rounds."""

    def __init__(self, config, exp):
        import torch
        from torch.utils.data import DataLoader, TensorDataset

        self.config, self.train = config, config.train
        self.algorithm = config.algorithm.name
        params = config.algorithm.params
        self.momentum = getattr(params, "momentum", 0.0) if self.algorithm == "dfedavgm" else 0.0
        self.rho = getattr(params, "rho", 0.0) if self.algorithm == "dfedsam" else 0.0
        data = exp.dataset
        generator = torch.Generator().manual_seed(config.seed)
        self.loaders = [DataLoader(TensorDataset(data.train_x[torch.as_tensor(ix)],
                                                 data.train_y[torch.as_tensor(ix)]),
                                   batch_size=self.train.batch_size, shuffle=True,
                                   generator=generator) for ix in exp.parts]
        self.models = []
        for i in range(len(exp.parts)):
            model = copy.deepcopy(exp.model)
            exp.layout.load_into(model, exp.x0[i])
            self.models.append(model)
        W = exp.topology.matrix(0)
        self.neighbours = [[(j, float(W[i, j])) for j in range(len(W)) if W[i, j] != 0]
                           for i in range(len(W))]
        self.test = (data.test_x, data.test_y)
        self.eval_model = copy.deepcopy(exp.model)

    def lr(self, t: int) -> float:
        return self.train.lr * self.train.lr_decay ** t

    def train_client(self, t: int, i: int) -> int:
        import torch
        import torch.nn.functional as F

        model = self.models[i]
        optimizer = torch.optim.SGD(model.parameters(), lr=self.lr(t), momentum=self.momentum,
                                    weight_decay=self.train.weight_decay)
        model.train()
        samples = 0
        for x, y in self.loaders[i]:
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            if self.rho:
                self.sam_gradient(model, x, y)
            optimizer.step()
            samples += len(y)
        return samples

    def sam_gradient(self, model, x, y) -> None:
        """.grad ← ∇F(w + ρ g/‖g‖) (SAM's second pass), w restored."""
        import torch
        import torch.nn.functional as F

        params = [p for p in model.parameters() if p.grad is not None]
        with torch.no_grad():
            norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params]))
            shifts = [p.grad * (self.rho / norm.clamp_min(1e-12)) for p in params]
            for p, e in zip(params, shifts, strict=True):
                p.add_(e)
        model.zero_grad()
        F.cross_entropy(model(x), y).backward()
        with torch.no_grad():
            for p, e in zip(params, shifts, strict=True):
                p.sub_(e)

    def gossip(self) -> None:
        """x_i ← Σ_{j ∈ N_i ∪ {i}} w_ij y_j, every parameter, from a snapshot of the y_j."""
        import torch

        with torch.no_grad():
            params = [list(m.parameters()) for m in self.models]
            mixed = [[sum(w * params[j][k] for j, w in self.neighbours[i])
                      for k in range(len(params[i]))] for i in range(len(self.models))]
            for own, new in zip(params, mixed, strict=True):
                for p, value in zip(own, new, strict=True):
                    p.copy_(value)

    def evaluate(self) -> float:
        import torch

        with torch.no_grad():
            states = [m.state_dict() for m in self.models]
            self.eval_model.load_state_dict(
                {k: sum(s[k] for s in states) / len(states) for k in states[0]})
            self.eval_model.eval()
            x, y = self.test
            correct = sum(int((self.eval_model(x[i:i + 1000]).argmax(1) == y[i:i + 1000]).sum())
                          for i in range(0, len(y), 1000))
        return correct / len(y)

    def round(self, t: int) -> tuple[int, float]:
        samples = sum(self.train_client(t, i) for i in range(len(self.models)))
        self.gossip()
        return samples, self.evaluate()


# --------------------------------------------------------------------------------------------
# One process: one implementation, one case, one policy
# --------------------------------------------------------------------------------------------
def child(case: str, impl: str, rounds: int, clients: int) -> None:
    import torch

    from gossipfl.core.runner import Runner, build_experiment

    config = case_config(case, clients)
    if impl == "gossipfl":
        runner = Runner(config)

        def one(t: int) -> tuple[int, float]:
            with torch.no_grad():
                runner.run_round(t)
                return -1, runner.evaluate()["test_acc"]
    else:
        loop = CarefulLoop(config, build_experiment(config))
        one = loop.round
    for t in range(rounds + 1):  # round 0 warms up
        start = time.perf_counter()
        _, acc = one(t)
        seconds = time.perf_counter() - start
        if t:
            print(json.dumps({"case": case, "impl": impl,
                              "policy": os.environ.get("OMP_WAIT_POLICY", "default"),
                              "round": t, "seconds": seconds, "acc": acc,
                              "threads": torch.get_num_threads()}), flush=True)


def spawn(case: str, impl: str, policy: str, rounds: int, clients: int) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if policy != "default":
        env["OMP_WAIT_POLICY"] = policy
    root = Path(__file__).resolve().parents[1]
    env["PYTHONPATH"] = os.pathsep.join([str(root / "src"), str(root),
                                         *filter(None, [env.get("PYTHONPATH")])])
    done = subprocess.run([sys.executable, "-m", "benchmarks.honest_baseline", "--child",
                           case, impl, "--rounds", str(rounds), "--clients", str(clients)],
                          capture_output=True, text=True, env=env, cwd=root, check=False)
    if done.returncode:
        raise RuntimeError(f"{case}/{impl}/{policy} failed:\n{done.stderr[-2000:]}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def table(rows: list[dict], cases: list[str]) -> str:
    def times(case, impl, policy):
        return [r["seconds"] for r in rows
                if (r["case"], r["impl"], r["policy"]) == (case, impl, policy)]

    lines = [("| case | gossipfl default | gossipfl PASSIVE | reference default | reference "
              "PASSIVE | ratio, each its own best | ratio, conservative | accuracy g / r |"),
             "|---|---|---|---|---|---|---|---|"]
    for case in cases:
        med = {(i, p): statistics.median(times(case, i, p)) for i in IMPLEMENTATIONS
               for p in POLICIES if times(case, i, p)}
        if len(med) < 4:
            continue
        ours = [med[("gossipfl", p)] for p in POLICIES]
        ref = [med[("reference", p)] for p in POLICIES]

        def cell(i, p, case=case):
            ts = times(case, i, p)
            return f"{statistics.median(ts):.2f} ({min(ts):.2f}–{max(ts):.2f})"

        acc = {i: statistics.median(r["acc"] for r in rows
                                    if (r["case"], r["impl"]) == (case, i))
               for i in IMPLEMENTATIONS}
        lines.append(
            f"| {case} | {cell('gossipfl', 'default')} | {cell('gossipfl', 'PASSIVE')} | "
            f"{cell('reference', 'default')} | {cell('reference', 'PASSIVE')} | "
            f"{min(ref) / min(ours):.2f}× | {min(ref) / max(ours):.2f}× | "
            f"{100 * acc['gossipfl']:.1f} / {100 * acc['reference']:.1f} % |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--reps", type=int, default=2, help="interleaved passes")
    parser.add_argument("--rounds", type=int, default=2, help="timed rounds per process")
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--out", type=Path, default=None, help="JSON lines of every round")
    parser.add_argument("--child", nargs=2, metavar=("CASE", "IMPL"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child, args.rounds, args.clients)
        return
    import torch

    from benchmarks.common import machine

    print(json.dumps(machine(torch.device("cpu")), default=str), flush=True)
    rows: list[dict] = []
    for rep in range(args.reps):
        for case in args.cases:
            for impl in IMPLEMENTATIONS:
                for policy in POLICIES:
                    got = spawn(case, impl, policy, args.rounds, args.clients)
                    rows += got
                    print(f"  pass {rep + 1} {case:14s} {impl:9s} {policy:8s} "
                          + " ".join(f"{r['seconds']:.2f}" for r in got), flush=True)
                    if args.out:
                        with args.out.open("a", encoding="utf-8") as f:
                            f.writelines(json.dumps(r) + "\n" for r in got)
    print()
    print(table(rows, args.cases))


if __name__ == "__main__":
    main()
