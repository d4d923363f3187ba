"""graphjit's differential fuzzer: random programs, compiled vs eager, failures shrunk into reproducers.

    python -m tests.fuzz --seed 0 --minutes 30 [--mode python] [--triton]     (__main__.py)

The modules, in the order a program goes through them:

    generator.py, ops.py   tensor mode: a seeded straight-line program over an op table, valid in eager
    pyprog.py              python mode: Python control flow and data structures around tensors
    program.py             the Program (inputs, statements, call plan) and the module it renders to
    worker.py              runs programs in a child process (a segfault or a hang is a result)
    runner.py, compare.py  eager vs compiled over the call plan; rounding noise triaged
    shrink.py              a failure made small and saved as a standalone reproducer
    known.py               hints naming known-open bug classes in a run's summary
    test_fuzz_ci.py        the short seeded run in CI; test_harness.py checks the fuzzer itself
"""
