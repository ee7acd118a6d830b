"""The stages of the gossip pipeline: what wraps the Mixer between senders and receivers.

A gossip step of an algorithm, x = W_t z on the gossiped columns, passes through a pipeline
built once by the composition root (:func:`gossipfl.assembly.experiment.build_experiment`)::

    z ──► stage 1 ──► stage 2 ──► … ──► the wire: W_t (failures included: W'_t) ──► x
          (compression with error feedback, robust aggregation under attack, …)

Each stage has one method over the messages, :meth:`Stage.mix` ``(z, t, steps, channel,
link)``, and a declaration of what it needs (:class:`Needs`), from which
:mod:`gossipfl.assembly.compat` derives every refusal of a combination of features. ``link`` is the
rest of the pipeline: ``link.mix(...)`` the next stage (at the end: W_t^Q z, its bytes
charged) and ``link.wire`` the transport itself (W_t's edges and products, compressed sends,
the byte count; :class:`gossipfl.network.wire.Wire`). A stage that takes over the messages (the
compressor sends C(z − x̂), a robust rule reads every neighbour's message) uses the wire and
does not call ``link.mix``.

**A stage of one's own** (a plugin) is a :class:`Stage` subclass registered with
:func:`register_stage` under its ``kind``, with its parameters declared once as ``Params`` (a
frozen :class:`~gossipfl.validation.Params` dataclass); a config asks for it in
``topology.stages``, a list of mappings ``{stage: <kind>, <parameters>}``, outermost first,
each typed by :func:`~gossipfl.validation.typed` (:func:`asked_stages`). Such stages wrap the
built-in ones (robust aggregation, then compression, which take the messages over), so a
plugin stage calls ``link.mix`` for the rest of the pipeline; its :class:`Needs` are checked
by :mod:`gossipfl.assembly.compat` as the built-ins' are (in its generic sentences).

A gossip call names its **channel**: the variable the algorithm gossips (``x``, DSGT's
``tracker``), declared in the algorithm's ``gossip_channels`` (:class:`Channel`: the name and
its declared position, which keys a stage's random streams and state).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from torch import Tensor

from gossipfl.errors import GossipflError, unknown_choice
from gossipfl.plugins import Registry, check_params_class
from gossipfl.validation import Params, typed


@dataclass(frozen=True)
class Needs:
    """What a stage needs of the run (each True: refused where the run lacks it)."""

    #: the same graph every round (state kept at the neighbours: CHOCO-Gossip's x̂)
    static_graph: bool = False
    #: the same W every round: no offline client or failed link (s = W x̂ kept incrementally)
    same_w: bool = False
    #: every neighbour's whole message (a robust rule; not compressed ones)
    whole_messages: bool = False
    #: every row in one process
    one_process: bool = False
    #: an algorithm whose gossip is x ← W x (not push-sum weights, masks, pairwise averages)
    plain_gossip: bool = True
    #: the gossip orders (``topology.order``) the stage is defined for
    orders: tuple[str, ...] = ("synchronous",)


@dataclass(frozen=True)
class Channel:
    """A gossip call's channel: the name the algorithm gives the variable it gossips, and
    its position in the algorithm's ``gossip_channels`` (the key of a stage's streams and
    state, so that the k-th declared variable keeps the k-th channel's numbers)."""

    name: str
    index: int


class Stage:
    """One stage of the pipeline (see the module docstring). ``key``: the config key that
    asks for it (named in its refusals); ``whole``: whether the messages it sends are the
    senders' rows in full (False: compressed); ``form``: the word for what it makes of a
    message, in the refusal of an operation that bypasses the pipeline."""

    kind: ClassVar[str] = ""
    needs: ClassVar[Needs] = Needs()
    whole: ClassVar[bool] = True
    form: ClassVar[str] = ""
    #: the parameters a config may give a registered stage (``topology.stages``), declared
    #: once (:class:`~gossipfl.validation.Params`)
    Params: ClassVar[type[Params]] = Params
    key: str = ""

    @classmethod
    def build(cls, params: Params, key: str) -> Stage:
        """A registered stage from its typed parameters (``key``: where the config asks for
        it, named in its refusals); the instance reads each parameter as an attribute."""
        stage = cls()
        stage.params, stage.key = params, key
        vars(stage).update(params.given())
        return stage

    _claimed: tuple[int, set] | None = None  # (round, channels gossiped in it): scratch

    def mix(self, z: Tensor, t: int, steps: int, channel: Channel, link: Any) -> Tensor:
        """``steps`` gossip steps of ``z`` ``[M, n]`` in round t on ``channel``."""
        raise NotImplementedError

    def claim(self, channel: Channel, t: int) -> None:
        """Refuse a second gossip of ``channel`` in round t (one sentence): a stage keys its
        streams and state by the channel, so two variables must not share one."""
        if self._claimed is None or self._claimed[0] != t:
            self._claimed = (t, set())
        if channel.name in self._claimed[1]:
            raise GossipflError(f"{self.key}: channel {channel.name!r} was gossiped twice in "
                                f"round {t}; give each variable the algorithm gossips its own "
                                "channel (fed.gossip(..., channel=name), declared in "
                                "gossip_channels).")
        self._claimed[1].add(channel.name)


#: the stages a config names in ``topology.stages`` (plugins'); the built-in stages are asked
#: for by their own sections (``topology.robust``/``byzantine``, ``topology.compression``)
STAGES: Registry = Registry("gossip stage", "topology.stages",
                            reserved=("robust", "compression"))


def register_stage(cls: type[Stage]) -> type[Stage]:
    """Class decorator: make the :class:`Stage` subclass ``cls`` available as
    ``topology.stages: [{stage: <cls.kind>, <its Params>}]``."""
    check_params_class(cls, f"gossip stage {cls.kind!r}")
    return STAGES.add(cls.kind, cls)


@dataclass(frozen=True)
class AskedStage:
    """One entry of ``topology.stages``: the stage's class, its typed parameters and its key
    (``topology.stages[i]``)."""

    stage: type[Stage]
    params: Params
    key: str


def asked_stages(spec: Any, key: str = "topology.stages") -> list[AskedStage]:
    """The entries of ``topology.stages`` (None: none), each typed; one sentence naming
    ``topology.stages[i]`` (and the parameter) for anything else than a list of mappings
    ``{stage: <a registered kind>, <its parameters>}``."""
    if spec is None:
        return []
    if not isinstance(spec, list | tuple):
        raise GossipflError(f"{key}: must be a list of stages such as [{{stage: name, "
                            f"<parameters>}}], got {spec!r}.")
    out = []
    for i, entry in enumerate(spec):
        where = f"{key}[{i}]"
        if not isinstance(entry, dict) or "stage" not in entry:
            raise GossipflError(f"{where}: must be a mapping with a 'stage' name, got "
                                f"{entry!r}.")
        name = entry["stage"]
        plugins = [n for n in STAGES.names() if n not in STAGES.reserved]
        if not plugins:
            raise GossipflError(f"{where}.stage: no gossip stage {name!r} is registered (a "
                                f"plugin registers one with gossipfl.topology.register_stage; "
                                f"robust and compressed gossip have their own keys, "
                                f"topology.robust and topology.compression).")
        if not isinstance(name, str) or name not in plugins:
            raise unknown_choice(f"{where}.stage", name, plugins)
        cls = STAGES.lookup(name)
        given = {p: v for p, v in entry.items() if p != "stage"}
        out.append(AskedStage(cls, typed(cls.Params, given, where, "gossip stage", name),
                              where))
    return out


__all__ = ["STAGES", "AskedStage", "Channel", "Needs", "Stage", "asked_stages",
           "register_stage"]
