"""``python -m workers.completion``: one completion worker process."""

from workers.completion.worker import main

if __name__ == "__main__":
    raise SystemExit(main())
