"""Serve the HTTP API alone: ``python -m lib.api [--config F] [--host H] [--port P]``.

The web UI (``webui.py``) serves the same API on its own port together with the UI;
this entry point is for API-only deployments and for benchmarks.
"""

from __future__ import annotations

import argparse
import logging
import sys

from lib.cli import add_config_flags, config_from_args
from lib.errors import TTSError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lib.api", description=__doc__.splitlines()[0])
    add_config_flags(parser, server=True)
    parser.add_argument("--log-level", default="info", help="debug, info, warning")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    from lib.api import create_app
    from lib.api.serving import serve
    from lib.pipeline.service import TTSService

    try:
        config = config_from_args(args)
        service = TTSService(config)
    except TTSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    warm = getattr(service.engine, "warm_in_background", None)
    if callable(warm):  # the model loads and checks itself while the server starts
        warm()
    try:
        serve(
            create_app(service),
            config.server,
            on_exit=service.watchdog.drain,
            log_level=args.log_level,
            access_log=False,
        )
    finally:
        service.close()
    return 0


if __name__ == "__main__":
    from lib.api.serving import exit_now

    exit_now(main())
