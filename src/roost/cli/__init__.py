"""roost.cli."""
