"""Real MaxText on this machine's CPU: its environment (env.py), a runner that executes it
as a job's head pod runs it (runner.py), and `make e2e-maxtext` (e2e.py)."""
