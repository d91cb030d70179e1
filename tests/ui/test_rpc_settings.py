"""The load settings' RPC servers field: the target goes to the servers, the draft
stays local, a malformed entry is said and cannot be applied, and a build without
the RPC backend says how to get it."""

from specdesk.engine import rpc as engine_rpc
from specdesk.ui.settings import ChatSettings, SettingsDialog


def test_rpc_servers_go_to_the_target_only_and_reload():
    s = ChatSettings(rpc="10.0.0.2:50052, 10.0.0.3:50052")
    assert s.model_spec("t.gguf", "target").rpc == ("10.0.0.2:50052", "10.0.0.3:50052")
    assert s.model_spec("d.gguf", "draft").rpc == ()
    assert s.needs_reload(ChatSettings())
    assert ChatSettings.from_dict(s.to_dict()) == s
    assert ChatSettings.from_dict({"rpc": "not an endpoint"}).rpc == ""  # a damaged value falls back


def test_dialog_says_why_an_endpoint_is_wrong_and_keeps_ok_off(qtbot, monkeypatch):
    monkeypatch.setattr(engine_rpc, "supported", lambda: True)
    dlg = SettingsDialog(ChatSettings(), has_gpu=False)
    qtbot.addWidget(dlg)
    dlg.rpc.setText("server-without-port")
    assert "must be host:port" in dlg.rpc_note.text() and not dlg._ok.isEnabled()
    dlg.rpc.setText("127.0.0.1:50052")
    assert dlg.rpc_note.text() == "" and dlg._ok.isEnabled()
    assert dlg.value().rpc == "127.0.0.1:50052"
    assert "reloads" in dlg.reload_note.text()
    dlg.close()


def test_dialog_without_the_rpc_backend_gives_the_reinstall_command(qtbot, monkeypatch):
    monkeypatch.setattr(engine_rpc, "supported", lambda: False)
    dlg = SettingsDialog(ChatSettings(), has_gpu=False)
    qtbot.addWidget(dlg)
    assert not dlg.rpc.isEnabled()
    assert 'CMAKE_ARGS="-DGGML_RPC=ON"' in dlg.rpc_note.text()
    dlg.close()


def test_the_notes_are_read_whole_on_a_1366x768_screen(qtbot, monkeypatch):
    """A build without GPU offload nor RPC says so in two long notes: shown, each gets the
    height its wrapped lines need (a form row gave one line's and cut them), and the dialog
    still fits a 1366x768 screen."""
    monkeypatch.setattr(engine_rpc, "supported", lambda: False)
    dlg = SettingsDialog(ChatSettings(), has_gpu=False)
    qtbot.addWidget(dlg)
    dlg.n_ctx.setValue(8192)  # the reload note too
    dlg.show()
    qtbot.waitExposed(dlg)
    for note in (dlg.gpu_note, dlg.rpc_note):
        assert note.isVisible() and note.text()
        assert note.height() >= note.heightForWidth(note.width()), (note.objectName(), note.size())
        assert note.heightForWidth(note.width()) > 2 * note.fontMetrics().height()  # wrapped: the check means something
    assert dlg.width() <= 1366 and dlg.height() <= 768 - 60, dlg.size()  # a taskbar's room left
    dlg.rpc.setEnabled(True)  # a build with RPC: an empty note takes no room, a complaint shows
    dlg._update_note()
    assert not dlg.rpc_note.isVisible()
    dlg.rpc.setText("server-without-port, " * 6)
    assert dlg.rpc_note.isVisible() and "host:port" in dlg.rpc_note.text()
    qtbot.waitUntil(lambda: dlg.rpc_note.height() >= dlg.rpc_note.heightForWidth(dlg.rpc_note.width()), timeout=5000)
    dlg.close()
