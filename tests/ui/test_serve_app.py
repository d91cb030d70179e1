"""The app's Serve switch with the real window and SmolLM2: the loaded pair at an
OpenAI-compatible endpoint, driven by the real ``openai`` client; the request list,
the live statistics in the side panel, and a chat answer that waits in the same
queue while a request runs."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import openai
import pytest

from specdesk.ui.main_window import MainWindow
from specdesk.ui.settings import ChatSettings
from drive import load
from clirun import free_port

GEN_TIMEOUT = 300_000
KEY = "ui-key"
COUNTING = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10,"


def serve(qtbot, w) -> openai.OpenAI:
    w.serve_tab.port.setValue(free_port())
    w.serve_tab.key.setText(KEY)
    w.tabs.setCurrentWidget(w.serve_tab)
    w.serve_tab.switch.click()
    qtbot.waitUntil(lambda: w.serve.url is not None or w.error_banner.isVisible(), timeout=60_000)
    assert w.serve.url, w.error_banner.text()
    return openai.OpenAI(base_url=w.serve.url + "/v1", api_key=KEY, max_retries=0, timeout=300)


class Holder(threading.Thread):
    """A client streaming a long answer until it is told to hang up."""

    def __init__(self, client: openai.OpenAI) -> None:
        super().__init__()
        self.client = client
        self.pieces: list[str] = []
        self.hang_up = threading.Event()
        self.error: Exception | None = None

    def run(self) -> None:
        try:
            stream = self.client.completions.create(model=self.model(), prompt=COUNTING, max_tokens=800, stream=True)
            for chunk in stream:
                self.pieces.append(chunk.choices[0].text)
                if self.hang_up.is_set():
                    stream.close()  # the client goes away mid-stream
                    return
        except Exception as e:  # noqa: BLE001 - checked by the test
            self.error = e

    def model(self) -> str:
        return self.client.models.list().data[0].id


def test_serve_lists_requests_shows_their_statistics_and_queues_the_chat(qtbot, window, smol_path, smol_draft_path):
    w = window
    # one thread: on a machine shared with other work, llama.cpp's threads would wait on each other
    w.apply_settings(ChatSettings(proposer="draft", auto_k=False, k=3, p_min=0.0, max_tokens=16, n_ctx=1024, threads=1))
    load(qtbot, w, smol_path, smol_draft_path)
    client = serve(qtbot, w)
    assert w.serve.toggle.isChecked() and w.serve.url in w.serve_tab.endpoint.text()
    assert not w.compare.run_btn.isEnabled()  # the pair is the server's while it serves
    assert w.stats_scroll.isVisible()  # the side panel shows on the Serve tab

    holder = Holder(client)
    holder.start()
    try:
        qtbot.waitUntil(lambda: len(holder.pieces) > 3 or holder.error is not None, timeout=GEN_TIMEOUT)
        assert holder.error is None, holder.error
        # the running request's statistics, live in the side panel, with which request they are
        assert w.serve.source.isVisible() and "request #" in w.serve.source.text() and "127.0.0.1" in w.serve.source.text()
        qtbot.waitUntil(lambda: w.stats.m_gen.value.text() not in ("–", "0", ""), timeout=GEN_TIMEOUT)
        shown = int(w.stats.m_gen.value.text())
        qtbot.waitUntil(lambda: int(w.stats.m_gen.value.text()) > shown, timeout=GEN_TIMEOUT)
        assert w.serve_tab.table.item(0, 3).text() == "running"

        # a chat answer now waits in the same line, and says so
        w.tabs.setCurrentIndex(0)
        with qtbot.waitSignal(w.generation_finished, timeout=GEN_TIMEOUT) as done:
            assert w.send("Say hello.")
            qtbot.waitUntil(lambda: "queued" in w.run_info.text(), timeout=30_000)
            assert w.run_info.text() == "queued behind 1 request" and "queued" in w.status_label.text()
            assert not w.chat_view.live_text  # nothing generated for it yet
            holder.hang_up.set()
        gen = done.args[0]
        assert gen.text.strip() and "queued" not in w.run_info.text()
        assert not w.serve.source.isVisible()  # the panel is the chat's again
    finally:
        holder.hang_up.set()
        holder.join(GEN_TIMEOUT / 1000)
    tickets = w.serve.queue.recent()
    request = next(t for t in tickets if t.kind == "completion")
    chat = next(t for t in tickets if t.kind == "app")
    assert request.state == "cancelled" and request.cancel_reason == "client gone" and request.steps_after_cancel <= 1
    assert chat.state == "done" and chat.queue_seconds > 0 and chat.started_at >= request.finished_at

    # a finished request: its row gives the client, tokens, speed and acceptance
    r = client.chat.completions.create(model=holder.model(), messages=[{"role": "user", "content": "Name a colour."}],
                                       max_tokens=12, temperature=0)
    spec = r.model_extra["speculation"]
    def rows() -> list[list[str]]:
        t = w.serve_tab.table
        return [[t.item(r, c).text() for c in range(t.columnCount())] for r in range(t.rowCount())]

    qtbot.waitUntil(lambda: rows()[0][2] == "chat" and rows()[0][3] == "done", timeout=30_000)
    row = rows()[0]
    assert row[1].startswith("127.0.0.1 · OpenAI/Python")
    assert [r[2:4] for r in rows()[1:3]] == [["this app", "done"], ["completion", "stopped (client gone)"]]
    assert row[5] == str(r.usage.completion_tokens) and float(row[6]) > 0
    assert row[7] == (f"{100 * spec['acceptance_rate']:.1f}%" if spec["acceptance_rate"] is not None else "-")
    assert w.serve_tab.summary.text().startswith("3 served")

    # off: the endpoint is gone, the chat still answers
    w.serve.toggle.trigger()
    qtbot.waitUntil(lambda: not w.serve.serving and w.serve._stopping is None, timeout=30_000)
    with pytest.raises(openai.APIConnectionError):
        client.models.list()
    assert w.compare.run_btn.isEnabled()


def test_serve_needs_a_pair_and_a_free_port(qtbot, window, smol_path):
    w = window
    w.serve_tab.switch.click()
    assert "Load a pair first" in w.error_banner.text() and not w.serve.serving and not w.serve_tab.switch.isChecked()
    w.apply_settings(ChatSettings(n_ctx=512, threads=1))
    load(qtbot, w, smol_path, None)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        w.serve_tab.port.setValue(taken.getsockname()[1])
        w.serve_tab.switch.click()
        qtbot.waitUntil(lambda: not w.serve.serving, timeout=60_000)
    assert "is in use" in w.error_banner.text() and not w.serve.toggle.isChecked()


def _raw(url: str, path: str, headers: dict) -> tuple[int, dict]:
    """A plain request with these headers (Host among them), for what no SDK sends."""
    import http.client
    import json
    from urllib.parse import urlsplit

    u = urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    try:
        conn.request("GET", path, headers=headers)
        r = conn.getresponse()
        return r.status, json.loads(r.read())
    finally:
        conn.close()


def test_the_switch_refuses_a_foreign_host_or_origin(qtbot, window, smol_path):
    """DNS rebinding (issue 42) through the app's Serve switch: on 127.0.0.1 a page whose
    own name was pointed at this machine (its Host) or a page on another origin gets 403
    in OpenAI's format; the SDK still works, and /health without the key says only "ok".
    With "other machines may connect" (0.0.0.0) no Host is checked: they call it by
    names it cannot know, and the key protects it."""
    w = window
    w.apply_settings(ChatSettings(n_ctx=512, threads=1, max_tokens=4))
    load(qtbot, w, smol_path, None)
    client = serve(qtbot, w)
    port = w.serve.url.rsplit(":", 1)[1]
    auth = {"Authorization": f"Bearer {KEY}"}
    status, body = _raw(w.serve.url, "/v1/models", {**auth, "Host": f"rebind.attacker.example:{port}"})
    assert status == 403 and body["error"]["code"] == "forbidden_host", body
    status, body = _raw(w.serve.url, "/requests", {**auth, "Origin": "http://evil.example"})
    assert status == 403 and body["error"]["code"] == "forbidden_origin", body
    assert _raw(w.serve.url, "/health", {}) == (200, {"status": "ok"})
    assert client.models.list().data[0].id == "SmolLM2-135M-Instruct.Q4_1"

    w.serve.toggle.trigger()
    qtbot.waitUntil(lambda: not w.serve.serving and w.serve._stopping is None, timeout=30_000)
    w.serve_tab.others.setChecked(True)
    serve(qtbot, w)
    port = w.serve.url.rsplit(":", 1)[1]
    status, body = _raw(f"http://127.0.0.1:{port}", "/v1/models", {**auth, "Host": f"my-desktop.lan:{port}"})
    assert status == 200, body
    w.serve.toggle.trigger()
    qtbot.waitUntil(lambda: not w.serve.serving and w.serve._stopping is None, timeout=30_000)


def _get(url: str, key: str | None = None) -> int:
    """The status of a GET, with ``Authorization: Bearer key`` when given."""
    import urllib.error
    import urllib.request

    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status
    except urllib.error.HTTPError as e:
        e.close()
        return e.code


def test_after_a_restart_one_click_on_the_model_bar_never_serves_the_network_without_a_key(qtbot, tmp_path, smol_path):
    """The Serve settings kept "other machines may connect" but not the key, and the
    switch on the model bar said only "Serve": after a restart one click there served to
    the whole network with no key (host=0.0.0.0, api_key=''). Now it says where it
    serves, and a key is made and shown first (this run has no keyring to keep one)."""
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QLineEdit

    port = free_port()
    QSettings().setValue("serve/others", True)  # as the last session saved them
    QSettings().setValue("serve/port", port)
    w = MainWindow(tmp_path / "data", autoload=False)
    w.show()
    try:
        w.apply_settings(ChatSettings(n_ctx=512, threads=1, max_tokens=4))
        load(qtbot, w, smol_path, None)
        assert w.serve_tab.others.isChecked() and w.serve_tab.key.text() == ""
        w.serve.toggle.trigger()  # the one click, on the model bar
        qtbot.waitUntil(lambda: w.serve.url is not None or w.error_banner.isVisible(), timeout=60_000)
        assert w.serve.url, w.error_banner.text()
        models = f"http://127.0.0.1:{port}/v1/models"
        assert _get(models) == 401  # no key, no answer
        key = w.serve_tab.key.text()
        assert len(key) >= 32 and _get(models, key) == 200
        # the new key is shown where the settings are, and said not to be kept
        assert w.serve_tab.key.echoMode() == QLineEdit.EchoMode.Normal
        note = w.serve_tab.key_note.text()
        assert "A new API key was made" in note and "no keyring" in note
        QSettings().sync()
        assert key not in Path(QSettings().fileName()).read_text()  # never in the settings file
        # the switch on the model bar says what one click exposes
        assert w.serve.toggle.text() == "Serve (network)"
        assert "every machine that can reach this one" in w.serve.toggle.toolTip()
        assert f"port {port}" in w.serve.toggle.toolTip()
        w.serve.toggle.trigger()
        qtbot.waitUntil(lambda: not w.serve.serving and w.serve._stopping is None, timeout=30_000)
        w.serve_tab.others.setChecked(False)
        assert w.serve.toggle.text() == "Serve" and "this machine only" in w.serve.toggle.toolTip()
    finally:
        w.close()


@pytest.fixture
def file_keyring(tmp_path):
    """A keyring that keeps what it is given (in a file of the test's), for this test only."""
    import keyring
    from keyring_file import FileKeyring

    before = keyring.get_keyring()
    kr = FileKeyring(tmp_path / "keyring.json")
    keyring.set_keyring(kr)
    yield kr
    keyring.set_keyring(before)


def test_the_api_key_is_kept_in_the_keyring_and_serves_again_after_a_restart(qtbot, file_keyring):
    from PySide6.QtCore import QSettings

    from specdesk.ui.serve_panel import ServeTab
    from specdesk.server.keys import SERVICE, USER

    first = ServeTab()
    qtbot.addWidget(first)
    first.others.setChecked(True)
    first.key.setText("typed-key-0123456789")
    assert first.start_settings().api_key == "typed-key-0123456789"
    assert file_keyring.get_password(SERVICE, USER) == "typed-key-0123456789"
    QSettings().sync()
    assert "typed-key" not in Path(QSettings().fileName()).read_text()
    # a restart: the keyring is asked only when serving starts, and the same key serves
    again = ServeTab()
    qtbot.addWidget(again)
    assert again.key.text() == "" and "keyring" in again.key.placeholderText()
    assert "with the API key set here" in again.warning.text()
    assert again.start_settings().api_key == "typed-key-0123456789" and not again.key_note.isVisible()
    # nothing kept any more (another machine, a cleared keyring): a new key, kept this time
    file_keyring.delete_password(SERVICE, USER)
    third = ServeTab()
    qtbot.addWidget(third)
    made = third.start_settings().api_key
    assert made and made != "typed-key-0123456789" and file_keyring.get_password(SERVICE, USER) == made
    assert "kept in this system's keyring" in third.key_note.text()


def test_without_a_keyring_nothing_is_kept_and_this_machine_alone_needs_no_key(qtbot):
    """The run's keyring backend is keyring's 'fail' one, as on a Linux box without a
    Secret Service: nothing is kept, nothing breaks; serving this machine alone without
    a key stays as it was."""
    from PySide6.QtCore import QSettings

    from specdesk.server.keys import store_key, stored_key
    from specdesk.ui.serve_panel import ServeTab

    assert not store_key("k") and stored_key() is None
    tab = ServeTab()
    qtbot.addWidget(tab)
    assert not tab.others.isChecked()
    s = tab.start_settings()
    assert s.host == "127.0.0.1" and s.api_key == "" and tab.warning.text() == ""
    tab.others.setChecked(True)
    assert "with a new API key, made and shown here when serving starts" in tab.warning.text()
    assert tab.start_settings().api_key and str(QSettings().value("serve/key_kept")).lower() in ("false", "0")
