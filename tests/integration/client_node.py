"""A real node for client tests: ``open_node`` under ``trio.run`` on a thread of its own."""

import threading

import trio

import roost

WAIT = 60.0  # bound on the node's start and stop (a loaded box is slow, never this slow)


class NodeThread:
    """A node on ``data_dir`` (with an admin server unless ``admin=False``), on a thread."""

    def __init__(self, app, data_dir, *, admin=True):
        self.app, self.data_dir, self.admin = app, data_dir, admin
        self.node = None
        self.failure = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, daemon=True)

    def __enter__(self):
        self._thread.start()
        assert self._ready.wait(WAIT), "the node did not start"
        if self.failure is not None:
            raise self.failure
        return self

    def __exit__(self, *exc):
        trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        self._thread.join(WAIT)
        assert not self._thread.is_alive(), "the node did not stop"
        if self.failure is not None:
            raise self.failure

    @property
    def admin_url(self):
        return self.node.admin_url

    def _main(self):
        try:
            trio.run(self._serve)
        except BaseException as exc:  # handed to the test's thread
            self.failure = exc
        finally:
            self._ready.set()

    async def _serve(self):
        admin = "127.0.0.1:0" if self.admin else None
        async with roost.open_node(self.app, self.data_dir, admin=admin) as node:
            self.node = node
            self._token = trio.lowlevel.current_trio_token()
            self._stop = trio.Event()
            self._ready.set()
            await self._stop.wait()
