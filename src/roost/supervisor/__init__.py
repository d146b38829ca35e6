"""roost.supervisor."""
