"""The admin server (``open_node(..., admin="127.0.0.1:0")``): JSON API, console, metrics.

Nothing here is public API beyond what ``open_node`` and ``NodeHandle.admin_url`` name;
docs/admin.md lists the endpoints and metrics. The modules load with the server, so
``import roost`` does not load starlette or prometheus-client.
"""

__all__: list[str] = []
