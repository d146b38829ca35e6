"""roost.queues."""
