#!/usr/bin/env python3
"""Executable entry for ``lightningd --plugin=/path/to/satsgate/plugin/satsgate_plugin.py``.

Uses the ``python3`` on lightningd's PATH, which must have satsgate installed
(``pip install <repo>``); from a source checkout it falls back to the
checkout itself.
"""

import os
import sys

if __name__ == "__main__":
    # Python put this file's directory first on sys.path; its module names
    # must not shadow top-level ones.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    try:
        import satsgate  # noqa: F401
    except ImportError:
        sys.path.insert(0, os.path.dirname(os.path.dirname(here)))

    from satsgate.plugin import main

    main()
