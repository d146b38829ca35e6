"""``roost.http``: the values of HTTP triggers (``app.http(method, path, entry)``).

An HTTP trigger's entry is called with a ``Request`` and returns a value (sent as JSON,
status 200) or a ``Response``. Nodes serve the routes when opened with
``roost.open_node(app, http="127.0.0.1:0")``; ``node.http_url`` is the base URL.
"""

from roost.queues._http import Request, Response
from roost.queues._http_server import HttpServer as _HttpServer  # noqa: F401 - the node service

__all__ = ["Request", "Response"]
