"""``python -m satsgate.plugin``: the Core Lightning plugin entry."""

from satsgate.plugin import main

# Guarded: multiprocessing's spawn re-imports the main module in its workers.
if __name__ == "__main__":
    main()
