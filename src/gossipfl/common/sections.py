"""The keys of the config's ``topology`` section that the topology registry declares against.

A leaf module (it imports only :mod:`gossipfl.validation`): :class:`gossipfl.config.
TopologyConfig` takes its shared parameters' defaults from here, and
:func:`gossipfl.topology.register_topology` checks a registration against these keys, so that
neither imports the other (``tests/assembly/test_plugins.py`` checks that the two agree).
"""

from __future__ import annotations

from pathlib import Path

from gossipfl.validation import COUNT, FRACTION, Rule

#: What ``topology.path`` and ``topology.matrix`` may hold (the custom topology checks the
#: file or array itself when it builds).
PATH = Rule(lambda v: v is None or isinstance(v, str | Path), "a file name or null",
            quoted=True)
MATRIX = Rule(lambda v: True, "an [M, M] array, from the Python API")

#: The topology parameters every ``topology`` section holds, whatever the topology, with their
#: rules and defaults: a topology reads one by declaring it at its registration
#: (``gossipfl.topology.register_topology``), and one set for a topology that does not read it
#: is warned about, not refused. A topology's other parameters are its own.
SHARED_TOPOLOGY_PARAMS: dict[str, Rule] = {"k": COUNT, "p": FRACTION, "s": COUNT, "path": PATH,
                                           "matrix": MATRIX}
SHARED_TOPOLOGY_DEFAULTS: dict[str, object] = {"k": 10, "p": 0.1, "s": 7, "path": None,
                                               "matrix": None}

#: The keys of the ``topology`` section besides a topology's own parameters (TopologyConfig's
#: fields but ``options``): no topology may declare a parameter of these names (the shared
#: ones excepted).
TOPOLOGY_SECTION_KEYS = ("name", "mixing", "k", "p", "s", "path", "sparse", "matrix", "order",
                         "compression", "robust", "stages")
