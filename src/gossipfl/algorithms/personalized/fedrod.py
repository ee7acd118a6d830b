"""Fed-RoD — federated robust decoupling (Chen & Chao, "On Bridging Generic and Personalized
Federated Learning for Image Classification", ICLR 2022), the linear personal-head variant
(not the hyper-network one; the DFedMDC paper does not say which it ran).

The model is a body f and a generic head h^G (together the server's model x, sent and
averaged as FedAvg); client i also keeps a personal head h^P_i of the head's shape, and its
personalized prediction is h^G(f(a)) + h^P_i(f(a)). For a linear head that is the same
network with head weights h^G + h^P_i, which is how gossipfl stores it.

Sampled client i, from x^t and its h^P_i, at every local step on one minibatch ξ (both
gradients at the same point, as the two losses of the paper's local training):

    generic  (balanced risk, Balanced Softmax):  ℓ_BR = −log softmax(z + log n_i)_y,
             z = h^G(f(a)), n_ic = client i's training samples of class c;
             x ← x − η (∇_x ℓ_BR(x; ξ) + wd·x)
    personal (empirical risk, body and h^G held):  ℓ_ER = CE(h^G(f(a)) + h^P(f(a)), y);
             h^P ← h^P − η (∇_{h^P} ℓ_ER + wd·h^P)
    x^{t+1} = x^t + η_g Σ_{i∈S_t} p_i (x_i − x^t)

Adding log n_i to the logits is adding it to the head's bias, so ∇ℓ_BR(x) is the plain
cross-entropy gradient at x with the head bias shifted by log n_i (exact): the model's head
needs a bias with one entry per class. h^P_i^0 = 0 (the personalized model starts as the
generic one). Client i's personalized model: x^t with head h^G + h^P_i.
"""

from __future__ import annotations

import torch

from gossipfl.algorithms import register
from gossipfl.algorithms.base import Phase, Work
from gossipfl.algorithms.local import LocalOptimizer
from gossipfl.algorithms.personalized.personal_server import PersonalServer
from gossipfl.algorithms.terms import pure
from gossipfl.engine.groups import ParamGroup
from gossipfl.errors import GossipflError


@register
class FedRoD(PersonalServer):
    name = "fedrod"
    paper = "Chen & Chao 2022, On Bridging Generic and Personalized FL (Fed-RoD, linear)"
    kept = "personal"  # h^P_i
    reads_label_counts = True  # the balanced softmax's log n_ic

    def init(self, x0):
        """The state; and, from what each client knows of its labels, the constants of the
        balanced softmax: the head bias's columns and log n_ic."""
        counts = self.env.label_counts
        if counts is None:
            raise GossipflError("algorithm.name: fedrod needs class labels (its balanced "
                                "softmax uses each client's class counts), got regression "
                                "targets.")
        self.logit_bias = self.head_bias(counts.shape[1])
        self.log_prior = counts.clamp_min(1e-30).log()  # [M, C] log n_ic (−69: no sample)
        return super().init(x0)

    def head_bias(self, classes: int) -> ParamGroup:
        """The columns of the head's bias (the logits' offsets)."""
        layout, groups = self.env.layout, self.env.groups
        for name, offset, shape in zip(layout.names, layout.offsets, layout.shapes,
                                       strict=True):
            if name in groups.personal_names and tuple(shape) == (classes,):
                return ParamGroup("logit_bias", ((offset, offset + classes),), layout.P)
        raise GossipflError(f"model.personal: fedrod needs a head bias of {classes} entries "
                            f"among the personal parameters, got "
                            f"{', '.join(groups.personal_names) or 'none'}.")

    def own_init(self, x0):
        return torch.zeros_like(super().own_init(x0))

    def personalize(self, x, own):
        personal = self.env.groups["personal"]
        personal.assign(x, personal.select(x) + own)

    def phases(self):
        return [Phase(begin=self.reset_head_velocity, update=self.two_heads_step)]

    def begin_round(self, ctx, state):
        clients = self.fed.sample(ctx.round, self.params.participation, ctx.plan.eligible)
        head = self.fed.rows(state["own"], clients)
        return Work(self.fed.broadcast(state["server"], clients), clients, head=head,
                    head_velocity=torch.zeros_like(head))

    def reset_head_velocity(self, ctx, work):
        """The head's momentum restarts with the phase, as the body's does."""
        work["head_velocity"].zero_()

    def head_optimizer(self, ctx, work) -> LocalOptimizer:
        """The personal head's optimizer: the phase's learning rate and momentum, its velocity
        kept in the round's scratch."""
        size = work["head"].shape[1]
        return LocalOptimizer(ParamGroup("head", ((0, size),), size), ctx.optimizer.lr,
                              ctx.optimizer.momentum, len(work), work.y,
                              velocity=work["head_velocity"])

    @pure
    def two_heads_step(self, ctx, work, batch):
        """The generic model on the balanced softmax, the personal head on the sum."""
        env, decay = ctx.env, ctx.env.train.weight_decay
        shifted = work.y.clone()
        self.logit_bias.assign(shifted, self.logit_bias.select(work.y)
                               + self.fed.rows(self.log_prior, work.clients))
        _, grad = env.gradient(shifted, batch)
        generic = grad + decay * work.y if decay else grad
        combined = work.y.clone()
        self.personalize(combined, work["head"])
        loss, grad = env.gradient(combined, batch)
        head = env.groups["personal"].select(grad)
        head = head + decay * work["head"] if decay else head
        ctx.optimizer.step(work, generic)
        self.head_optimizer(ctx, work).step(Work(work["head"]), head)
        return loss

    def end_round(self, ctx, state, work):
        self.fed.set_rows(state["own"], work.clients, work["head"])
        self.upload(state, work.y, work.clients)
