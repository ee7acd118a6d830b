"""The run: the round loop (:mod:`.runner`: step rounds through the round driver, stop on
divergence, checkpoint) and evaluation of its models (:mod:`.evaluation`). Above the assembly
of an experiment (:mod:`gossipfl.assembly`), below the run directory (:mod:`gossipfl.results`)
and the studies."""
