"""Beam search over a decoding state from ``tasks.generate``: the ``num_beams`` best partial
sequences per prompt by summed log-probability, kept apart from greedy decoding and sampling."""

from __future__ import annotations

import torch

from maskwise.tasks.sampling import penalise_repetition


def search_beams(
    state, row_limit: torch.Tensor, steps: int, seen: torch.Tensor, cfg, eos_id: int | None, pad_id: int
) -> tuple[list[list[int]], list[float]]:
    """Each prompt's best hypothesis and its score, from ``state`` holding every prompt repeated
    ``cfg.num_beams`` times (``row_limit``: (B*K,) new-token limits; ``seen``: (B*K, V) tokens the
    repetition penalty starts from). ``cfg``: the call's ``GenerationConfig``.

    A beam that emits [EOS] becomes a finished hypothesis scored log-prob / length ** length_penalty;
    a prompt is done once it has ``num_beams`` finished hypotheses and its best running beam cannot
    overtake the worst of them at the current length (HF's heuristic). With one beam this is greedy
    decoding: the argmax is the only beam kept, and it stops at the same [EOS]."""
    K, device = cfg.num_beams, row_limit.device
    B = row_limit.shape[0] // K  # rows are prompts repeated K times
    beam_scores = torch.full((B, K), float("-inf"), device=device)
    beam_scores[:, 0] = 0.0  # all beams start identical: expand only the first at the first step
    sequences = torch.zeros(B * K, 0, dtype=torch.long, device=device)
    hypotheses: list[list[tuple[float, list[int]]]] = [[] for _ in range(B)]
    done = [False] * B

    def normalised(score: float, length: int) -> float:
        return score / length**cfg.length_penalty

    logits = state.first()
    for t in range(steps):
        logp = penalise_repetition(logits.float(), seen, cfg.repetition_penalty).log_softmax(dim=-1)
        V = logp.shape[-1]
        candidates = (beam_scores.view(-1, 1) + logp).view(B, K * V)  # (B, K*V)
        top_scores, top_index = candidates.topk(min(2 * K, K * V), dim=-1)  # (B, 2K)
        next_beam = torch.zeros(B, K, dtype=torch.long, device=device)
        next_token = torch.full((B, K), pad_id, dtype=torch.long, device=device)
        next_scores = torch.full((B, K), float("-inf"), device=device)
        last_step = t == steps - 1
        for b in range(B):
            if done[b]:
                next_beam[b] = torch.arange(K, device=device)  # keep shape; these rows are ignored
                continue
            kept = 0
            for score, index in zip(top_scores[b].tolist(), top_index[b].tolist()):
                beam, token = divmod(index, V)
                row = b * K + beam
                if eos_id is not None and token == eos_id:
                    if len(hypotheses[b]) < K or normalised(score, t + 1) > min(h[0] for h in hypotheses[b]):
                        hypotheses[b].append((normalised(score, t + 1), sequences[row].tolist() + [token]))
                        hypotheses[b] = sorted(hypotheses[b], key=lambda h: -h[0])[:K]
                    continue
                next_beam[b, kept], next_token[b, kept], next_scores[b, kept] = beam, token, score
                kept += 1
                if kept == K:
                    break
            best_running = next_scores[b].max().item()
            length_reached = t + 1 >= int(row_limit[b * K])
            if len(hypotheses[b]) >= K and normalised(best_running, t + 1) <= hypotheses[b][-1][0]:
                done[b] = True
            elif last_step or length_reached:
                for k in range(K):
                    if next_scores[b, k] > float("-inf"):
                        row = b * K + int(next_beam[b, k])
                        hypotheses[b].append(
                            (
                                normalised(float(next_scores[b, k]), t + 1),
                                sequences[row].tolist() + [int(next_token[b, k])],
                            )
                        )
                hypotheses[b] = sorted(hypotheses[b], key=lambda h: -h[0])[:K]
                done[b] = True
        if all(done):
            break
        index = (torch.arange(B, device=device)[:, None] * K + next_beam).flatten()  # (B*K,)
        tokens = next_token.flatten()
        sequences = torch.cat([sequences[index], tokens[:, None]], dim=1)
        beam_scores = next_scores
        seen = seen[index]
        seen[torch.arange(B * K, device=device), tokens] = True
        state.reorder(index)
        active = torch.tensor([not done[i // K] for i in range(B * K)], device=device)
        logits = state.step(tokens, active)
    best = [max(h, key=lambda x: x[0]) for h in hypotheses]
    return [tokens for _, tokens in best], [score for score, _ in best]
