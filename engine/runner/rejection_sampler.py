"""Verify draft tokens against the target model: vLLM's rejection sampler for drafters that
give no probabilities (the n-gram drafter), on the logits of one forward pass.

For a request with drafts d_1..d_k the runner computes logits at k + 1 positions: row j
(j < k) is the target's distribution for the token d_{j+1} stands for, the last row the
one after every draft (the bonus position). Output: the accepted drafts, then one token
from the target (1 to k + 1 tokens), as in vLLM 0.20 (vllm/v1/sample/rejection_sampler.py):

- Greedy: accept while the draft equals the target's argmax; then the argmax at the first
  mismatch, or the bonus row's argmax if every draft was accepted. This is exactly the
  run without drafts, token for token.
- Random (temperature > 0): the draft probability is taken as 1, so d is accepted with
  probability p(d) under the target's processed distribution (temperature, top-p): with
  u ~ U[0, 1) in float64, accepted iff p(d) >= u (and p(d) > 0). At the first rejection the
  token is drawn from p with d's mass removed and renormalised, by vLLM's exponential race
  argmax(p / q), q ~ Exp(1) (one q per request per step, like vLLM). If all are accepted,
  the bonus token is the usual sample at the last row. The output is distributed as the
  target's own samples.

Random numbers come from the request's generator in vLLM's order: the bonus sample (drawn
for every request, whether or not it is used), then k uniforms, then q. A request without
drafts draws only its sample, so its tokens do not depend on its batch-mates' drafts.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from engine.runner.sampler import RequestSampling, sample, target_probs


def rejection_sample(
    logits: torch.Tensor,
    draft_token_ids: Sequence[Sequence[int]],
    states: Sequence[RequestSampling],
) -> list[list[int]]:
    """Output tokens per request. `logits` [sum(k_i + 1), V] float32 holds, request after
    request, the k_i rows at request i's drafts and then its bonus row."""
    ends: list[int] = []
    row = 0
    for drafts in draft_token_ids:
        row += len(drafts) + 1
        ends.append(row - 1)
    if row == len(ends):
        # No drafts: plain sampling (the same call and draws as a step without drafts).
        return [[token] for token in sample(logits, list(states))]
    bonus = sample(logits[torch.tensor(ends, device=logits.device)], list(states))
    argmax = logits.argmax(dim=-1).tolist()
    outputs: list[list[int]] = []
    # Random requests: (output, drafts, bonus token, accepted? [k], recovered [k]).
    pending: list[tuple[list[int], Sequence[int], int, torch.Tensor, torch.Tensor]] = []
    for drafts, state, end, bonus_token in zip(draft_token_ids, states, ends, bonus, strict=True):
        out: list[int] = []
        outputs.append(out)
        start = end - len(drafts)
        if not drafts:
            out.append(bonus_token)
        elif state.generator is None:
            for j, draft in enumerate(drafts):
                out.append(argmax[start + j])
                if argmax[start + j] != draft:
                    break
            else:
                out.append(bonus_token)
        else:
            accepted, recovered = _random_verify(logits[start:end], drafts, state)
            pending.append((out, drafts, bonus_token, accepted, recovered))
    if pending:
        # One device->host copy for every random request of the step.
        flags = torch.cat([p[3] for p in pending]).tolist()
        tokens = torch.cat([p[4] for p in pending]).tolist()
        i = 0
        for out, drafts, bonus_token, _, _ in pending:
            for j, draft in enumerate(drafts):
                if flags[i + j]:
                    out.append(draft)
                else:
                    out.append(tokens[i + j])
                    break
            else:
                out.append(bonus_token)
            i += len(drafts)
    return outputs


def _random_verify(
    logits: torch.Tensor, drafts: Sequence[int], state: RequestSampling
) -> tuple[torch.Tensor, torch.Tensor]:
    """For each draft position: accepted? [k] bool, and the recovered token [k] to output
    at the first rejection. Draws k uniforms, then one q, from the request's generator."""
    generator = state.generator
    device = logits.device
    probs = target_probs(logits, state.params)
    k, vocab = probs.shape
    uniform = torch.rand(k, dtype=torch.float64, device=device, generator=generator)
    q = torch.empty(vocab, dtype=torch.float32, device=device).exponential_(generator=generator)
    draft = torch.tensor(list(drafts), dtype=torch.long, device=device).unsqueeze(1)
    p_draft = probs.gather(1, draft).squeeze(1).double()
    accepted = (p_draft > 0) & (p_draft >= uniform)
    recovered = (probs.scatter(1, draft, 0.0) / q).argmax(dim=-1)
    return accepted, recovered
