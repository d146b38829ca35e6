"""roost.workflow."""
