"""``python -m ferrolock``: the operator's command line (see ferrolock.cli)."""

from ferrolock.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
