"""Repository tooling (generators run by `make golden`); not installed, not shipped."""
