"""A config made into a run: loading and layering (:mod:`.loading`), which features combine
(:mod:`.compat`, every refusal of a combination in one place), the memory plan checked before
anything of size M is allocated (:mod:`.plan`) and the composition root that builds the
experiment's objects (:mod:`.experiment`)."""
