#!/usr/bin/env python3
"""Fill the cache with the hot phrases before users ask for them (run at release time).

    preload_cache.py [--phrases FILE] [--config FILE] [--cache-dir DIR] [--workers N]
                     [--dry-run] [--force] [--shared-url URL] [--objects-url URL] [--engine NAME]
                     [--model-dir DIR]
    preload_cache.py --server URL [--token TOKEN] [--phrases FILE]

Skips what is cached, shows a progress bar on stderr and ends with one summary line on
stdout: ``preload: N phrases, G generated, C already cached, F failed in T s`` (each piece
of the list's templates counts as one phrase); on stderr, the phrases made again because
a lexicon change re-keyed them (``preload: re-rendered after a lexicon change: ...``), and
those rebuilt differently from their approved takes (``preload: rebuilt audio differs from
the approved take: ...``, then a count; the approved audio is kept).
Exit status: 0 when nothing failed, 1 when some phrases failed, 2 when the phrase file
or the configuration is invalid. Safe to run while the web UI serves the same cache,
and safe to kill at any point and run again.

With ``--server URL`` the list is submitted to a running deployment as batch jobs
(``POST /api/batch``, admin: ``--token`` or the variable ``TTS_ADMIN_TOKEN``) that every
replica works on; the progress bar follows them and the summary and exit status are the
same (2 also when the server refuses the job). Run again, the same list follows the
same jobs.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lib.request.phrases import PhraseRequest

__all__ = ["main"]

_LOGGER = logging.getLogger("preload_cache")

EXIT_OK, EXIT_FAILED, EXIT_INVALID, EXIT_INTERRUPTED = 0, 1, 2, 130


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    from lib.cli import add_config_flags

    parser = argparse.ArgumentParser(prog="preload_cache.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--phrases", default="hot_phrases.json", help="phrase list (default: hot_phrases.json)")
    add_config_flags(parser)
    parser.add_argument(
        "--workers", type=int, default=1,
        help="requests in parallel (default: 1; on 2 cores with the Kokoro base, 2 make about 18 %% more audio "
        "per second: bench/bench_threads.py)",
    )  # fmt: skip
    parser.add_argument("--dry-run", action="store_true", help="only count what would be generated")
    parser.add_argument("--force", action="store_true", help="regenerate phrases that are already cached")
    parser.add_argument(
        "--server", metavar="URL",
        help="submit the list to a running deployment (POST /api/batch) instead of making it here, e.g. "
        "http://tts.internal:7860",
    )  # fmt: skip
    parser.add_argument(
        "--token", help="with --server: the admin token (default: the variable TTS_ADMIN_TOKEN, server.admin_token_env)"
    )
    parser.add_argument(
        "--verify", action="store_true",
        help="first check every cached entry and remove damaged ones and ones whose audio cannot be their "
        "text (silent, far too short); the preload then makes the phrases among them again",
    )  # fmt: skip
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from lib.batch.preload import advance, preload, print_report, progress_bar
    from lib.cli import config_from_args
    from lib.compose.templates import load_templates
    from lib.errors import ConfigError, TTSError
    from lib.pipeline.service import TTSService
    from lib.request.access import LOCAL
    from lib.request.phrases import PhraseRules, expand, load_phrases

    if args.workers < 1:
        print("preload: --workers must be at least 1", file=sys.stderr)
        return EXIT_INVALID
    try:
        config = config_from_args(args)
        rules = PhraseRules.from_config(config.preload)
        requests = expand(load_phrases(args.phrases, rules))
        templates = load_templates(args.phrases, rules)
    except TTSError as exc:
        print(f"preload: {exc}", file=sys.stderr)
        return EXIT_INVALID
    if args.server:
        if args.force or args.dry_run or args.verify or args.workers != 1:
            print("preload: --force, --dry-run, --verify and --workers do not go with --server", file=sys.stderr)
            return EXIT_INVALID
        token = args.token or os.environ.get(config.server.admin_token_env) or None
        return _remote(args.server, token, requests, len(templates))

    try:
        service = TTSService(config)
    except ConfigError as exc:  # e.g. --objects-url without AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY
        print(f"preload: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except TTSError as exc:
        print(f"preload: cannot start the {config.engine} engine: {exc}", file=sys.stderr)
        print(f"preload: {len(requests)} phrases, 0 generated, 0 already cached, {len(requests)} failed in 0.0 s")
        return EXIT_FAILED
    if args.verify:
        checked = service.admin.verify(caller=LOCAL)
        print(
            f"preload: verify: {checked['checked']} entries checked, {checked['corrupt_removed']} damaged and "
            f"{checked['implausible_removed']} implausible removed",
            file=sys.stderr, flush=True,
        )  # fmt: skip
    bar = progress_bar(len(requests) + sum(len(service.templates.pieces(t)) for t in templates))
    progress = advance(bar)

    try:
        report = preload(service, requests, workers=args.workers, force=args.force, dry_run=args.dry_run,
                         on_done=progress, templates=templates, caller=LOCAL)  # fmt: skip
    except KeyboardInterrupt:
        print("preload: interrupted; entries made so far are kept, run it again to finish", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        if bar is not None:
            bar.close()
        service.close()
    print_report(report, out=sys.stdout, err=sys.stderr)
    return EXIT_FAILED if report.failed else EXIT_OK


def _remote(server: str, token: str | None, requests: list[PhraseRequest], templates: int) -> int:
    """The list as batch jobs of ``server``, followed with the progress bar."""
    import httpx

    from lib.batch.preload import advance, print_report, progress_bar
    from lib.batch.remote import RemoteRefusal, run_remote

    if templates:
        print(
            f"preload: --server: the list's {templates} templates are left out (a batch job makes phrases); "
            "preload them on a machine with the cache",
            file=sys.stderr,
        )
    bar = progress_bar(len(requests))
    progress = advance(bar)

    try:
        report = run_remote(server.rstrip("/"), token, requests, on_done=progress)
    except RemoteRefusal as exc:
        print(f"preload: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except httpx.HTTPError as exc:
        print(f"preload: cannot reach {server}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("preload: interrupted; the server goes on with the jobs: run it again to follow them", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        if bar is not None:
            bar.close()
    print_report(report, out=sys.stdout, err=sys.stderr)
    return EXIT_FAILED if report.failed else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
