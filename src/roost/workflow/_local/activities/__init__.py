"""The local host's activity worker: attempts, their limits, threads, rows and log lines."""
