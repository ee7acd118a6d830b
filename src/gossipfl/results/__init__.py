"""Results of runs, in modules with one job each:

- :mod:`gossipfl.results.rundir` — the run directory's files, the recorder, checkpoints;
- :mod:`gossipfl.results.ranks` — the run directory as each rank of a distributed run sees it;
- :mod:`gossipfl.results.inputs` — the files a run read, fingerprinted for ``--resume``;
- :mod:`gossipfl.results.interrupts` — Ctrl-C and SIGTERM, at the end of a round;
- :mod:`gossipfl.results.lifecycle` — prepare (fresh / resume), execute, how a run ended;
- :mod:`gossipfl.results.reporting` — loading runs back, tables and figures.
"""

from gossipfl.results.lifecycle import (
    PreparedRun,
    RunOutcome,
    execute,
    prepare_fresh,
    prepare_resume,
)
from gossipfl.results.reporting import (
    Run,
    comparison_table,
    find_runs,
    format_bytes,
    load_run,
    report,
    table_csv,
    table_markdown,
    write_run_figures,
)
from gossipfl.results.rundir import (
    RunDirectory,
    metrics_from_csv,
    new_run_path,
    primary_metric,
)

__all__ = ["PreparedRun", "Run", "RunDirectory", "RunOutcome", "comparison_table", "execute",
           "find_runs", "format_bytes", "load_run", "metrics_from_csv", "new_run_path",
           "prepare_fresh", "prepare_resume", "primary_metric", "report", "table_csv",
           "table_markdown", "write_run_figures"]
