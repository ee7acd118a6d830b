"""What a run shows and produces, as leaves any layer may use: :class:`Result`
(:mod:`.result`), progress bars on stderr (:mod:`.progress`), figures as PNG files
(:mod:`.plots`) and the experiment trackers, TensorBoard and Weights & Biases
(:mod:`.trackers`). The run directory itself is :mod:`gossipfl.results`."""
