"""roost.testing."""
