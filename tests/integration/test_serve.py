"""``specdesk serve`` as an editor or a script uses it: a real server subprocess on
127.0.0.1 with SmolLM2, driven by the real ``openai`` client (and plain HTTP where a
client would not go)."""

from __future__ import annotations

import json
import subprocess

import pytest
from prometheus_client.parser import text_string_to_metric_families
from serving import PY, isolated_env, start_serve

KEY = "test-key-1234"
MAX = 24
QUESTION = "Name three colours."


@pytest.fixture(scope="module")
def model_args(smol_path, smol_draft_path):
    return ["--target", smol_path, "--draft", smol_draft_path, "--ctx", "1024", "--threads", "1", "--k", "3"]


@pytest.fixture(scope="module")
def server(model_args, tmp_path_factory):
    s = start_serve(model_args, tmp_path_factory.mktemp("serve"), key=KEY)
    yield s
    assert s.stop() == 0, s.stderr()
    assert "Traceback" not in s.stderr(), s.stderr()


@pytest.fixture(scope="module")
def client(server):
    return server.client()


@pytest.fixture(scope="module")
def served_id(client):
    return client.models.list().data[0].id


@pytest.fixture(scope="module")
def generated(model_args, tmp_path_factory):
    """``specdesk generate --json`` on the same model, settings, question and max tokens."""
    r = subprocess.run([PY, "-m", "specdesk", "generate", *map(str, model_args), "--prompt", QUESTION,
                        "--max-tokens", str(MAX), "--json"], capture_output=True, text=True, timeout=600,
                       env=isolated_env(tmp_path_factory.mktemp("generate")))
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def ask(client, model, **kw):
    kw.setdefault("messages", [{"role": "user", "content": QUESTION}])
    kw.setdefault("max_tokens", MAX)
    kw.setdefault("temperature", 0)
    return client.chat.completions.create(model=model, **kw)


def check_adds_up(usage: dict, timings: dict, spec: dict, text_tokens: int | None = None) -> None:
    """``timings`` and ``speculation`` agree with each other and with ``usage``."""
    assert timings["predicted_n"] == usage["completion_tokens"]
    if text_tokens is not None:
        assert usage["completion_tokens"] == text_tokens
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert timings["prompt_n"] + timings["cache_n"] == usage["prompt_tokens"]
    assert usage["prompt_tokens_details"]["cached_tokens"] == timings["cache_n"]
    assert timings["draft_n"] == spec["drafted"] == sum(spec["drafted_per_position"])
    assert timings["draft_n_accepted"] == spec["accepted"] == sum(spec["accepted_per_position"])
    assert spec["drafted"] > 0, "a same-vocabulary draft at k=3 drafts on this question"
    assert spec["acceptance_rate"] == pytest.approx(spec["accepted"] / spec["drafted"])
    assert spec["tokens_per_step"] == pytest.approx((spec["accepted"] + spec["steps"]) / spec["steps"])
    assert spec["acceptance_per_position"] == [pytest.approx(a / d) for a, d in
                                               zip(spec["accepted_per_position"], spec["drafted_per_position"])]
    # every verify step emits one target token, plus the accepted drafts (an EOS ends it early)
    assert usage["completion_tokens"] <= spec["steps"] + spec["accepted"]
    assert timings["predicted_per_second"] == pytest.approx(timings["predicted_n"] / (timings["predicted_ms"] / 1000), rel=1e-3)
    assert spec["proposer"] == "draft" and spec["k"] == 3 and sum(spec["decisions"].values()) == spec["steps"]


def test_models_and_health(server, served_id):
    assert served_id == "SmolLM2-135M-Instruct.Q4_1"
    h = server.request("GET", "/health", headers={})  # no key needed, and without it nothing more than "up"
    assert h.status == 200 and h.json() == {"status": "ok"}
    h = server.get("/health")  # with the key: the model and the queue
    assert h.json()["model"] == served_id and h.json()["capacity"] == 8
    m = server.get("/v1/models").json()["data"][0]
    assert m["meta"]["draft"] == "smol-q4_0.gguf" and m["meta"]["n_ctx"] == 1024
    assert any("serves 'SmolLM2-135M-Instruct.Q4_1'" in line for line in server.stdout)
    assert "WARNING" not in server.stderr()  # loopback: no warning


def test_chat_completion_equals_generate(client, served_id, generated):
    r = ask(client, served_id)
    assert r.choices[0].message.content == generated["text"]
    assert r.usage.completion_tokens == len(generated["tokens"]) == generated["stats"]["generated"]
    assert r.usage.prompt_tokens == generated["prompt_tokens"]
    assert r.choices[0].finish_reason == {"max_tokens": "length", "eos": "stop"}[generated["stop_reason"]]
    x = r.model_extra
    check_adds_up(r.usage.model_dump(), x["timings"], x["speculation"], len(generated["tokens"]))


def test_streamed_chat_equals_generate(client, served_id, generated):
    chunks = list(ask(client, served_id, stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == generated["text"]
    assert chunks[0].choices[0].delta.role == "assistant"
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finals) == 1 and finals[0].choices[0].finish_reason in ("length", "stop")
    last = chunks[-1]
    assert last.choices == [] and last.usage.completion_tokens == len(generated["tokens"])
    assert all(c.usage is None for c in chunks[:-1])
    x = finals[0].model_extra
    check_adds_up(last.usage.model_dump(), x["timings"], x["speculation"], len(generated["tokens"]))
    # one chunk per propose/verify step that wrote text: speculation shows in the stream too
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) <= x["speculation"]["steps"]


def test_raw_chatml_completion_tokenizes_as_the_chat(client, served_id):
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": QUESTION}]
    chat = ask(client, served_id, messages=messages, max_tokens=12)
    chatml = f"<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n"
    raw = client.completions.create(model=served_id, prompt=chatml, max_tokens=12, temperature=0)
    assert raw.usage.prompt_tokens == chat.usage.prompt_tokens
    assert raw.choices[0].text == chat.choices[0].message.content  # the same tokens in, the same answer out
    assert raw.object == "text_completion" and raw.model_extra["timings"]["predicted_n"] == raw.usage.completion_tokens
    plain = client.completions.create(model=served_id, prompt=chatml, max_tokens=1, extra_body={"parse_special": False})
    # as text, each <|im_start|> and <|im_end|> is six tokens or so, not one
    assert plain.usage.prompt_tokens >= raw.usage.prompt_tokens + 5 * 5


def test_stop_string_cuts_the_answer(client, served_id, generated):
    full = generated["text"]
    cut = full.split()[2]  # a word from the middle of the answer
    r = ask(client, served_id, stop=[cut])
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].message.content == full[: full.index(cut)]
    chunks = list(ask(client, served_id, stop=cut, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == full[: full.index(cut)]


def _metrics(server) -> dict:
    out = {}
    for fam in text_string_to_metric_families(server.get("/metrics").text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _delta(after: dict, before: dict, name: str, **labels) -> float:
    key = (name, tuple(sorted(labels.items())))
    return after.get(key, 0.0) - before.get(key, 0.0)


def test_metrics_parse_and_count_the_requests(server, client, served_id):
    before = _metrics(server)
    answers = [ask(client, served_id), ask(client, served_id, max_tokens=10)]
    streamed = list(ask(client, served_id, max_tokens=6, stream=True, stream_options={"include_usage": True}))
    bad = server.post("/v1/chat/completions", {"messages": [], "model": served_id})
    assert bad.status == 400
    after = _metrics(server)
    usages = [a.usage for a in answers] + [streamed[-1].usage]
    specs = [a.model_extra["speculation"] for a in answers] + \
            [next(c for c in streamed if c.choices and c.choices[0].finish_reason).model_extra["speculation"]]
    assert _delta(after, before, "specdesk_requests_total", endpoint="chat", outcome="finished") == 3
    assert _delta(after, before, "specdesk_http_requests_total", path="/v1/chat/completions", status="200") == 3
    assert _delta(after, before, "specdesk_http_requests_total", path="/v1/chat/completions", status="400") == 1
    assert _delta(after, before, "specdesk_generation_tokens_total") == sum(u.completion_tokens for u in usages)
    assert _delta(after, before, "specdesk_prompt_tokens_total") == sum(u.prompt_tokens for u in usages)
    assert _delta(after, before, "specdesk_draft_tokens_total") == sum(s["drafted"] for s in specs)
    assert _delta(after, before, "specdesk_draft_accepted_tokens_total") == sum(s["accepted"] for s in specs)
    assert _delta(after, before, "specdesk_verify_steps_total") == sum(s["steps"] for s in specs)
    for pos in (1, 2, 3):
        want = sum(s["accepted_per_position"][pos - 1] for s in specs if len(s["accepted_per_position"]) >= pos)
        assert _delta(after, before, "specdesk_draft_accepted_tokens_per_pos_total", position=str(pos)) == want
    assert _delta(after, before, "specdesk_queue_wait_seconds_count") == 3
    assert after[("specdesk_queue_depth", ())] == 0 and after[("specdesk_requests_running", ())] == 0
    assert after[("specdesk_queue_capacity", ())] == 8
    assert after[("specdesk_decode_tokens_per_second", ())] > 0


def test_sampling_fields_a_random_seed_and_max_completion_tokens(client, served_id):
    r = ask(client, served_id, temperature=0.8, top_p=0.9, seed=-1, max_tokens=None, max_completion_tokens=5,
            extra_body={"top_k": 20, "min_p": 0.05})
    assert r.usage.completion_tokens <= 5 and r.choices[0].finish_reason in ("length", "stop")
