"""The maintainers' tools, each a command line: `make test` and `make test-all` (all_tests.py, with the
pytest plugin pytest_lanes.py that lets two processes share a run), `make compile-check` (compile_check.py)
and `make lessons` with the solution notebooks' refresh (run_notebooks.py)."""
