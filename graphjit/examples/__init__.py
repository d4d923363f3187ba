"""Small models used by the demo, the tests and the benchmarks (random weights, no downloads)."""
