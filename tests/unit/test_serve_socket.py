"""The listening socket's options per platform (issue 42): on Windows SO_REUSEADDR
would let another local process take the server's port."""

from __future__ import annotations

import socket
import sys

import pytest

from specdesk.server.runner import bind, listen_options


def test_the_listening_socket_options_per_platform():
    """On Windows SO_REUSEADDR lets another process bind the same port and take the
    server's connections (with their keys and prompts): there the socket is
    SO_EXCLUSIVEADDRUSE. Only the choice can be tested here: these tests run on Linux,
    whose socket module has no SO_EXCLUSIVEADDRUSE, and no second process on Windows
    can be tried to bind over it."""
    assert listen_options("win32") == [("SO_EXCLUSIVEADDRUSE", 1)]
    for platform in ("linux", "darwin", "freebsd14"):
        assert listen_options(platform) == [("SO_REUSEADDR", 1)]
    assert listen_options() == listen_options(sys.platform)


@pytest.mark.skipif(sys.platform == "win32", reason="the POSIX option; Windows' choice is checked above")
def test_bind_sets_the_chosen_options():
    sock = bind("127.0.0.1", 0)
    try:
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR) != 0
    finally:
        sock.close()
