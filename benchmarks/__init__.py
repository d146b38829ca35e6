"""roost's benchmark suite: roost next to raw trio (and raw LMDB), ratios in one run.

Run ``python -m benchmarks [--quick] [--json PATH] [--only SUITE]``; see ``__main__``.
"""
