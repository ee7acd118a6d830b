"""What crosses clients: the gossip pipeline over the links of W_t (:mod:`.wire`), the
Federation, the one channel between clients (:mod:`.federation`), and what each client has
on its own (:mod:`.clients`). Above the pieces (topology, compression, trust, engine), below
the algorithms that call it."""
