"""A study as one tensor (``gossipfl sweep STUDY --pack``): runs that differ in their seed
(and learning rate) run as one stacked computation of S·M clients, each run's numbers those
it has alone (same seeds, same minibatches), each written to its own run directory.

- :mod:`~gossipfl.studies.packing.fits`: which runs pack, in which groups (and why not);
- :mod:`~gossipfl.studies.packing.joint`: the joint round (:class:`~gossipfl.studies.packing.joint.Pack`);
- :mod:`~gossipfl.studies.packing.execute`: the lockstep of the runs into their run directories;
  the sweep's side (which runs are done, which pack together) is :func:`gossipfl.studies.sweep.run_packed`
  (here it would import the sweep that imports it).
"""

from gossipfl.studies.packing.execute import execute_packed
from gossipfl.studies.packing.fits import PACKABLE, pack_groups, refusal
from gossipfl.studies.packing.joint import Pack

__all__ = ["PACKABLE", "Pack", "execute_packed", "pack_groups", "refusal"]
