"""Tests of graphjit/compiler (a package, so its module names never collide with other test folders)."""
