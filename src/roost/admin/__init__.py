"""The admin server of a node: JSON API, metrics and the web console (issue 16).

Stand-in package file of the ``console`` branch; the ``admin`` branch owns this module.
"""
