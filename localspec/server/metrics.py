"""Observability: one log line per request, and the counters /metrics serves in Prometheus text
format (prometheus_client), named after vLLM's speculative-decoding metrics and llama-server's.

    localspec_requests_total{endpoint, finish_reason}   generations finished
    localspec_prompt_tokens_total, localspec_generation_tokens_total
    localspec_spec_decode_num_drafts_total              verify steps that carried a draft
    localspec_spec_decode_num_draft_tokens_total        drafted tokens
    localspec_spec_decode_num_accepted_tokens_total     drafted tokens the target accepted
    localspec_spec_decode_num_accepted_tokens_per_pos_total{position}, ..._num_draft_tokens_per_pos_total
    localspec_decode_seconds_total                      decode-loop time (tokens/s = rate of tokens / rate of this)
    localspec_tokens_per_second                         the last generation's decode speed
    localspec_requests_processing, localspec_requests_deferred   running and waiting now
"""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from ..session import Reply

log = logging.getLogger("localspec.server")


class Metrics:
    """The server's counters, in a registry of its own (one per app)."""

    def __init__(self, status):
        """status() -> the worker's {"busy", "queued", ...}, read when /metrics is scraped."""
        self.registry = r = CollectorRegistry()
        self.requests = Counter("localspec_requests", "Generations finished", ["endpoint", "finish_reason"], registry=r)
        self.prompt = Counter("localspec_prompt_tokens", "Prompt tokens of finished generations", registry=r)
        self.generated = Counter("localspec_generation_tokens", "Tokens generated", registry=r)
        self.drafts = Counter("localspec_spec_decode_num_drafts", "Verify steps that carried a draft", registry=r)
        self.draft_tokens = Counter("localspec_spec_decode_num_draft_tokens", "Drafted tokens", registry=r)
        self.accepted = Counter("localspec_spec_decode_num_accepted_tokens", "Drafted tokens accepted", registry=r)
        self.accepted_at = Counter("localspec_spec_decode_num_accepted_tokens_per_pos",
                                   "Drafted tokens accepted at each draft position (0 = first)", ["position"], registry=r)
        self.drafted_at = Counter("localspec_spec_decode_num_draft_tokens_per_pos",
                                  "Drafted tokens at each draft position (0 = first)", ["position"], registry=r)
        self.seconds = Counter("localspec_decode_seconds", "Seconds in the decode loop (prefill excluded)", registry=r)
        self.speed = Gauge("localspec_tokens_per_second", "Decode speed of the last generation", registry=r)
        Gauge("localspec_requests_processing", "Generations running", registry=r).set_function(
            lambda: int(status()["busy"]))
        Gauge("localspec_requests_deferred", "Requests waiting their turn", registry=r).set_function(
            lambda: status()["queued"])

    def record(self, request_id: str, reply: Reply) -> None:
        """Count a finished generation and log its line (called in the worker thread)."""
        s = reply.stats
        self.requests.labels("chat" if request_id.startswith("chatcmpl") else "completions", reply.finish_reason).inc()
        self.prompt.inc(s.prompt_tokens)
        self.generated.inc(s.generated)
        self.drafts.inc(s.drafted_at[0] if s.drafted_at else 0)
        self.draft_tokens.inc(s.drafted)
        self.accepted.inc(s.accepted)
        for i, (d, a) in enumerate(zip(s.drafted_at, s.accepted_at)):
            self.drafted_at.labels(str(i)).inc(d)
            self.accepted_at.labels(str(i)).inc(a)
        self.seconds.inc(s.total_s)
        self.speed.set(s.tokens_per_s)
        alpha = "n/a" if s.alpha is None else f"{s.alpha:.3f}"
        # drafter and gamma as --json and the `speculative` object give them: hybrid, not ngram+model
        log.info("%s prompt=%d generated=%d tok/s=%.1f alpha=%s drafter=%s gamma=%s finish=%s", request_id,
                 s.prompt_tokens, s.generated, s.tokens_per_s, alpha, s.drafter_flag, s.gamma_value,
                 reply.finish_reason)

    def text(self) -> bytes:
        return generate_latest(self.registry)
