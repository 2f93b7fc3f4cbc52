"""Stop conditions applied after each sampled token (vLLM's check_stop): EOS unless
ignore_eos, a stop token, max_tokens, or reaching max_model_len."""

from __future__ import annotations

from engine.request import Request, RequestStatus, SamplingParams


def check_stop(request: Request, token_id: int, max_model_len: int) -> bool:
    params: SamplingParams = request.sampling_params
    if not params.ignore_eos and token_id == params.eos_token_id:
        request.status = RequestStatus.FINISHED_STOPPED
        return True
    if params.stop_token_ids and token_id in params.stop_token_ids:
        request.status = RequestStatus.FINISHED_STOPPED
        request.stop_reason = token_id
        return True
    num_tokens = request.num_tokens
    if num_tokens >= max_model_len or num_tokens - request.num_prompt_tokens >= params.max_tokens:
        request.status = RequestStatus.FINISHED_LENGTH_CAPPED
        return True
    return False
