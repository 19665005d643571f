"""Benchmarks of decide's scoring paths (`make bench`); see bench/README.md."""
