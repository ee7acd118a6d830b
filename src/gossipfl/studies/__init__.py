"""Work above one run: study grids (:mod:`.sweep`, on worker processes :mod:`.jobs`, packed
into one federation :mod:`.packing`), the stability study (:mod:`.stability`) and results as
DataFrames (:mod:`.frames`)."""
