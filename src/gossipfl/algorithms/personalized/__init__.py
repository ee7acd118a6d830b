"""Personalized federated learning: every client keeps a model of its own.

A personalized algorithm declares ``"personalized"`` in ``evaluations``: the runner then
measures :meth:`~gossipfl.algorithms.base.Algorithm.personalized_models` on each client's
label-matched local test split (the DisPFL protocol) and tables report that accuracy first.
Partial personalization splits the model into the ``shared`` body and the ``personal`` head
(:mod:`gossipfl.engine.groups`); full personalization keeps whole models per client.
"""
