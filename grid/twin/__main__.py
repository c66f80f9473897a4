"""``python -m grid.twin <sglang launch_server flags>``: start the embedded SGLang twin (see grid/twin/server.py)."""

import sys

from grid.twin.server import main

if __name__ == "__main__":
    sys.exit(main())
