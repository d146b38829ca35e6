"""roost.admin: the admin server of a node (JSON API, metrics, console)."""
