"""The simulation's foundation, below every component: counter-based randomness
(:mod:`.rng`), the run's state in one place (:mod:`.state`: :class:`RunState`, one
namespace per owner) and the topology section's declared keys (:mod:`.sections`)."""
