"""The lossless speculative-decoding loop over any backend of `specmoe.backends` (docs/decoding.md).

Imports only backends, the typed drafts and the error type; the modules, one concept each:

- `acceptance`: the acceptance rules for draft-then-verify (greedy match, rejection sampling), pure.
- `sampling`: logits to the distribution both draft and target sample from.
- `make_drafter`: the drafter a typed draft (`specmoe.drafts`: a model, an oracle, an n-gram lookup,
  the target's MTP module) builds against a target.
- `drafters`: the drafters that propose up to γ tokens per sequence; `oracle` and `ngram` hold the
  oracle's dialed acceptance and prompt-lookup drafting; `heads` drafts with an MTP module or an
  EAGLE-3 head from the target's hidden states, and `llamacpp_mtp` with a llama.cpp target's own
  MTP layer.
- `decode`: the decode loops, speculative and plain, through the same backend calls; `clock` splits
  each round's time into its phases.
- `records`: what a decode records, raw per round and per sequence; scalars live in `specmoe.metrics`.
- `divergence`: where two decodes of one prompt part, and how close the target's call was there.
"""
