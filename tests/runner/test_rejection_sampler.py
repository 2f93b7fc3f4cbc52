"""Draft verification: greedy accepts the argmax prefix; random sampling is lossless (the
first token after a draft is distributed as the target's own sample) and seeded."""

from __future__ import annotations

from collections import Counter

import torch

from engine.request import SamplingParams
from engine.runner.rejection_sampler import rejection_sample
from engine.runner.sampler import GREEDY, RequestSampling, sample, target_probs

CPU = torch.device("cpu")
P = torch.tensor([0.5, 0.3, 0.15, 0.05])
Q = torch.tensor([0.1, 0.2, 0.3, 0.4])


def one_hot_rows(*argmaxes: int, vocab: int = 6) -> torch.Tensor:
    rows = torch.zeros(len(argmaxes), vocab)
    for i, a in enumerate(argmaxes):
        rows[i, a] = 5.0
    return rows


def seeded(seed: int = 0, temperature: float = 1.0, top_p: float = 1.0) -> RequestSampling:
    return RequestSampling(SamplingParams(temperature=temperature, top_p=top_p), seed, CPU)


def test_greedy_accepts_while_the_draft_is_the_argmax() -> None:
    # Request a: drafts (1, 2, 3) against argmaxes (1, 2, 4 | bonus 5): two accepted.
    # Request b: no drafts. Request c: drafts (0, 0) all accepted, then the bonus 3.
    logits = torch.cat([one_hot_rows(1, 2, 4, 5), one_hot_rows(2), one_hot_rows(0, 0, 3)])
    out = rejection_sample(logits, [(1, 2, 3), (), (0, 0)], [GREEDY, GREEDY, GREEDY])
    assert out == [[1, 2, 4], [2], [0, 0, 3]]
    # A wrong first draft: only the target's token.
    assert rejection_sample(one_hot_rows(4, 1), [(3,)], [GREEDY]) == [[4]]


def test_without_drafts_it_is_plain_sampling() -> None:
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(1))
    states = [seeded(1), GREEDY, seeded(2, temperature=0.7, top_p=0.8)]
    twins = [seeded(1), GREEDY, seeded(2, temperature=0.7, top_p=0.8)]
    assert rejection_sample(logits, [(), (), ()], states) == [[t] for t in sample(logits, twins)]


def test_a_request_without_drafts_does_not_depend_on_its_batch_mates() -> None:
    logits = torch.randn(5, 50, generator=torch.Generator().manual_seed(2))
    alone = rejection_sample(logits[4:], [()], [seeded(5)])
    mixed = rejection_sample(logits, [(7, 9, 11), ()], [seeded(4), seeded(5)])
    assert mixed[1] == alone[0]
    assert 1 <= len(mixed[0]) <= 4


def test_target_probs_apply_temperature_and_top_p() -> None:
    logits = P.log().unsqueeze(0)
    torch.testing.assert_close(target_probs(logits, SamplingParams(temperature=1.0)), P[None])
    cut = target_probs(logits, SamplingParams(temperature=1.0, top_p=0.8))
    torch.testing.assert_close(cut, torch.tensor([[0.625, 0.375, 0.0, 0.0]]))


def _first_two_tokens(draft: int, top_p: float, n: int) -> tuple[Counter[int], Counter[int]]:
    """Counts of the first output token, and of the second one when the draft was accepted,
    over n verifications of one draft (target P at the draft, Q at the bonus position)."""
    state = seeded(123, top_p=top_p)
    logits = torch.stack([P.log(), Q.log()])
    first: Counter[int] = Counter()
    second: Counter[int] = Counter()
    for _ in range(n):
        out = rejection_sample(logits, [(draft,)], [state])[0]
        first[out[0]] += 1
        if len(out) == 2:
            assert out[0] == draft
            second[out[1]] += 1
    return first, second


def _close(counts: Counter[int], probs: list[float], tol: float = 0.035) -> None:
    total = sum(counts.values())
    freq = [counts[i] / total for i in range(len(probs))]
    assert all(abs(f - p) < tol for f, p in zip(freq, probs, strict=True)), (freq, probs)


def test_random_verification_is_lossless() -> None:
    # Draft 1 (p = 0.3) is accepted 30% of the time; rejections draw from P without 1.
    # Either way the first token is distributed as P, and after an acceptance the bonus
    # token as Q.
    first, second = _first_two_tokens(draft=1, top_p=1.0, n=3000)
    _close(first, P.tolist())
    _close(second, Q.tolist(), tol=0.06)
    assert abs(sum(second.values()) / 3000 - 0.3) < 0.035


def test_a_draft_outside_top_p_is_never_accepted() -> None:
    first, second = _first_two_tokens(draft=2, top_p=0.8, n=1500)
    assert not second
    _close(first, [0.625, 0.375, 0.0, 0.0])


def test_random_verification_is_seeded() -> None:
    logits = torch.randn(5, 40, generator=torch.Generator().manual_seed(3))
    drafts = [(3, 8, 8, 1)]

    def run(seed: int) -> list[list[list[int]]]:
        state = seeded(seed, temperature=0.3)
        return [rejection_sample(logits, drafts, [state]) for _ in range(20)]

    assert run(9) == run(9)
    assert run(9) != run(10)
