"""Raw prompts parse special tokens, as llama.cpp's tools do: a hand-written ChatML
prompt is the same tokens as the chat template renders for the same messages."""

from __future__ import annotations

import json
import subprocess

from serving import PY, isolated_env

MESSAGES = [{"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "Write a haiku about the sea."}]
CHATML = ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
          "<|im_start|>user\nWrite a haiku about the sea.<|im_end|>\n<|im_start|>assistant\n")


def test_raw_chatml_tokenizes_as_the_chat_path(smol_session):
    chat = smol_session.chat_prompt(MESSAGES)
    assert smol_session.raw_prompt(CHATML) == chat
    im_start = smol_session.raw_prompt("<|im_start|>")
    assert len(im_start) == 1 and chat.count(im_start[0]) == 3
    # as plain text, each of the six special tokens is several tokens of text
    plain = smol_session.raw_prompt(CHATML, parse_special=False)
    assert im_start[0] not in plain and len(plain) >= len(chat) + 6 * 4


def test_generate_raw_json_says_how_many_tokens_the_prompt_became(smol_session, smol_path, tmp_path):
    def prompt_tokens(*extra) -> int:
        r = subprocess.run([PY, "-m", "specdesk", "generate", "--target", str(smol_path), "--proposer", "none", "--ctx", "256",
                            "--threads", "1", "--max-tokens", "1", "--json", "--prompt", CHATML, *extra],
                           capture_output=True, text=True, timeout=300, env=isolated_env(tmp_path))
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)["prompt_tokens"]

    special, plain = prompt_tokens("--raw"), prompt_tokens("--raw", "--no-parse-special")
    assert special == len(smol_session.chat_prompt(MESSAGES))
    assert plain == len(smol_session.raw_prompt(CHATML, parse_special=False)) >= special + 6 * 4
