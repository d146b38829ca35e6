"""The embedded workflow host: runs the workflow core on this node's LMDB store and trio loop.

Private: a node installs it as its default workflow host; nothing outside the node's wiring,
the admin server and the command line reaches into it.
"""
