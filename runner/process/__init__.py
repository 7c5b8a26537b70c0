"""The runner subprocess: `python -m runner --model NAME_OR_PATH --port N` serves the runner
protocol (docs/runner.md) on 127.0.0.1 (see app.py for the endpoints)."""
