"""``/metrics`` in Prometheus' text format (prometheus_client, a registry per server).

Counters follow the requests' own statistics: tokens in and out, drafted and
accepted tokens, accepted per draft position (as vLLM's
``num_accepted_tokens_per_pos``), verify steps and decode time, so
``rate(specdesk_generation_tokens_total) / rate(specdesk_decode_seconds_total)`` is the
decode speed; gauges give the queue depth, the running request and the last request's
speed."""

from __future__ import annotations

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)

from .generation import Outcome
from .queue import GenerationQueue

PREFIX = "specdesk_"
WAIT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class Metrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self, queue: GenerationQueue) -> None:
        disable_created_metrics()  # no *_created series next to every counter: they all start with the server
        self.registry = r = CollectorRegistry(auto_describe=True)
        p = PREFIX
        self.http = Counter(p + "http_requests", "HTTP responses by path and status code", ["path", "status"], registry=r)
        self.requests = Counter(p + "requests", "Generation requests by endpoint and outcome "
                                "(finished, cancelled, failed, rejected: the queue was full)", ["endpoint", "outcome"], registry=r)
        self.prompt_tokens = Counter(p + "prompt_tokens", "Prompt tokens of the requests that ran", registry=r)
        self.prompt_evaluated = Counter(p + "prompt_evaluated_tokens", "Prompt tokens the target evaluated "
                                        "(the rest were reused from the previous request)", registry=r)
        self.generated = Counter(p + "generation_tokens", "Tokens generated", registry=r)
        self.drafted = Counter(p + "draft_tokens", "Tokens drafted (proposed to the target)", registry=r)
        self.accepted = Counter(p + "draft_accepted_tokens", "Drafted tokens the target accepted", registry=r)
        self.drafted_pos = Counter(p + "draft_tokens_per_pos", "Tokens drafted at each draft position (1 = first)",
                                   ["position"], registry=r)
        self.accepted_pos = Counter(p + "draft_accepted_tokens_per_pos", "Drafted tokens accepted at each draft position "
                                    "(as vLLM's num_accepted_tokens_per_pos)", ["position"], registry=r)
        self.steps = Counter(p + "verify_steps", "Propose/verify passes of the target", registry=r)
        self.decode_seconds = Counter(p + "decode_seconds", "Time spent decoding (after the prompt)", registry=r)
        self.prompt_seconds = Counter(p + "prompt_seconds", "Time spent evaluating prompts", registry=r)
        self.queue_wait = Histogram(p + "queue_wait_seconds", "Time a request waited for its turn", buckets=WAIT_BUCKETS,
                                    registry=r)
        depth = Gauge(p + "queue_depth", "Requests waiting for their turn", registry=r)
        depth.set_function(lambda: queue.depth)
        running = Gauge(p + "requests_running", "Requests generating now (0 or 1: one pair, one at a time)", registry=r)
        running.set_function(lambda: 1 if queue.running is not None else 0)
        cap = Gauge(p + "queue_capacity", "Requests that may wait before the server answers 503", registry=r)
        cap.set(queue.capacity)
        self.last_speed = Gauge(p + "decode_tokens_per_second", "Decode speed of the last finished request", registry=r)

    def response(self, path: str, status: int) -> None:
        self.http.labels(path=path, status=str(status)).inc()

    def rejected(self, endpoint: str) -> None:
        self.requests.labels(endpoint=endpoint, outcome="rejected").inc()

    def observe(self, endpoint: str, o: Outcome) -> None:
        """A request admitted to the queue has ended."""
        self.requests.labels(endpoint=endpoint, outcome=o.outcome).inc()
        self.queue_wait.observe(o.ticket.queue_seconds)
        st = o.stats
        if st is None:
            return
        self.prompt_tokens.inc(st.prompt_tokens)
        self.prompt_evaluated.inc(st.prompt_evaluated)
        self.generated.inc(st.generated)
        self.drafted.inc(st.drafted)
        self.accepted.inc(st.accepted)
        for i, n in enumerate(st.drafted_per_position):
            self.drafted_pos.labels(position=str(i + 1)).inc(n)
        for i, n in enumerate(st.accepted_per_position):
            self.accepted_pos.labels(position=str(i + 1)).inc(n)
        self.steps.inc(st.steps)
        self.decode_seconds.inc(st.decode_seconds)
        self.prompt_seconds.inc(st.prompt_seconds)
        if st.tokens_per_second is not None:
            self.last_speed.set(st.tokens_per_second)

    def render(self) -> bytes:
        return generate_latest(self.registry)
