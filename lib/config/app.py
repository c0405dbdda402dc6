"""Configuration: ``config.yaml`` read once into frozen, typed, validated objects.

Precedence, lowest first: built-in defaults < the YAML file < environment variables
< command-line flags. Every key ``section.name`` can be set from the environment as
``TTS_SECTION_NAME`` (top-level keys as ``TTS_NAME``), e.g. ``TTS_CACHE_DIR`` or
``TTS_ENGINE``. An unknown key or a bad value raises :class:`ConfigError` naming the key.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from lib.config.load import assign, build, env_values, parse_size, require
from lib.config.provenance import ProvenanceConfig
from lib.config.readings import ReadingsConfig
from lib.config.server import ServerConfig
from lib.config.tenants import TenantsConfig
from lib.config.voicemap import OpenAIConfig
from lib.config.watchdog import WatchdogConfig
from lib.errors import ConfigError

__all__ = [
    "ENGINE_NAMES",
    "MAX_TTL",
    "AppConfig",
    "BatchConfig",
    "BuiltinConfig",
    "CacheConfig",
    "CosyVoiceConfig",
    "OpenAIConfig",
    "PreloadConfig",
    "PromptConfig",
    "ProvenanceConfig",
    "ReadingsConfig",
    "SegmentsConfig",
    "ServerConfig",
    "TemplatesConfig",
    "TenantsConfig",
    "TextConfig",
    "VoicesConfig",
    "WatchdogConfig",
    "default_config_path",
    "load_config",
    "parse_size",
]

ENV_PREFIX = "TTS_"

#: Fields given as sizes ("2GiB", "500MB" or bytes).
_SIZE_FIELDS = frozenset(
    {
        "size_limit",
        "memory_bytes",
        "transcode_bytes",
        "max_upload_bytes",
        "prompt_cache_bytes",
        "profile_bytes",
        "max_header_bytes",
    }
)

#: Keys whose ``TTS_*`` variable is taken as plain text, not read as YAML (secrets: any
#: characters; ``cache.old_secrets`` comma-separated).
_RAW_ENV = frozenset({"cache.secret", "cache.old_secrets"})

#: Longest TTL accepted anywhere (10 years): beyond it "forever" is meant; leave ttl out.
MAX_TTL = 10 * 365 * 86400.0

#: Engines selectable with ``engine:`` in config.yaml or ``--engine`` (built by
#: :func:`lib.engines.create_engine`). ``tone`` is the deterministic test double.
ENGINE_NAMES = ("builtin", "cosyvoice", "tone")
#: ``cache.eviction_policy`` values: the app's own (lib/cache/policy.py) and diskcache's two.
EVICTION_POLICIES = ("cost-aware", "least-recently-used", "least-frequently-used")


@dataclass(frozen=True)
class CacheConfig:
    """The result cache (``cache:`` in config.yaml)."""

    dir: str = "cosyvoice_cache"
    """Cache directory; created 0700. Never on NFS (diskcache uses SQLite)."""
    size_limit: int = 2 * 1024**3
    """Upper bound of the whole cache directory in bytes (``2GiB``, ``500MB`` accepted):
    results, saved voices, profiles, locks, statistics and their logs (lib.cache.stores)."""
    eviction_policy: str = "cost-aware"
    """``cost-aware`` (keeps what saves the most engine time per byte, by request
    frequency that ages; resists preload scans; see lib/cache/policy.py),
    ``least-recently-used`` or ``least-frequently-used`` (diskcache's own)."""
    pin_preload: bool = False
    """Pin what a preload makes (cost-aware only): not evicted while that phrase list is
    the one last preloaded."""
    pin_fraction: float = 0.5
    """Pinned entries are exempt from eviction only while they hold at most this
    fraction of ``size_limit``."""
    ttl: float | None = None
    """Default time-to-live of an entry in seconds; null keeps entries until evicted."""
    max_entry_fraction: float = 0.1
    """An entry larger than this fraction of ``size_limit`` is served but not stored."""
    memory_bytes: int = 64 * 1024**2
    """Byte budget of the in-memory tier of ready-to-send WAV bytes (0 disables it)."""
    transcode_bytes: int = 32 * 1024**2
    """Byte budget of the in-memory cache of transcoded audio (mp3, ogg, flac)."""
    store_text: bool = True
    """Keep the normalised text in each entry's metadata (for the dashboard)."""
    lock_lease: float = 5.0
    """Seconds a single-flight lock lives unless renewed (its holder renews it every
    third of that while the engine runs); a crashed holder blocks a key at most this
    long."""
    lock_timeout: float = 600.0
    """Longest a request waits for another process's synthesis of the same key."""
    shared_url: str | None = None
    """``redis://host:port/db`` of a shared tier for several replicas; null for none."""
    objects_url: str | None = None
    """S3 endpoint URL of an object-store tier (MinIO, Ceph RGW, AWS S3) holding every
    stored result for all replicas: the first path segment is the bucket, the rest a key
    prefix, e.g. ``http://minio.internal:9000/tts-cache/prod``. Credentials and region
    from ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION``. Null
    for none (docs/objects.md)."""
    objects_redirect: bool = False
    """With ``objects_url``: answer ``GET /api/audio/{key}.wav|flac`` with a 302 to a
    presigned URL of the audio in the store, so a CDN or the client fetches it there."""
    stats_phrases: int = 1000
    """Most phrases the statistics keep with their text (the least requested go first)."""
    secret: str | None = field(default=None, repr=False, metadata={"secret": True})
    """A secret shared by the replicas (at least 16 bytes; ``TTS_CACHE_SECRET``): every value
    written to Redis or the object store that decides what is served (results, approved
    takes, saved voices, voice profiles, playable copies) carries an HMAC-SHA256 tag over its
    key and bytes, and one without a valid tag is never served (a miss, made again). Null:
    no tags (docs/security-notes.md). Never logged or shown."""
    old_secrets: tuple[str, ...] = field(default=(), repr=False, metadata={"secret": True})
    """Earlier secrets still accepted on reading, while entries tagged with them remain
    (``TTS_CACHE_OLD_SECRETS``: comma-separated); new entries are tagged with ``secret``."""

    def __post_init__(self) -> None:
        short = [s for s in self.old_secrets if len(s.encode("utf-8")) < 16]
        require(
            (
                self.secret is None or len(self.secret.encode("utf-8")) >= 16,
                f"cache.secret: must be at least 16 bytes, got {len((self.secret or '').encode('utf-8'))} (its value "
                "is not shown); make one with: python -c 'import secrets; print(secrets.token_hex(32))'",
            ),
            (
                not short,
                "cache.old_secrets: each must be at least 16 bytes (their values are not shown); drop the short one",
            ),
            (
                self.secret is not None or not self.old_secrets,
                "cache.old_secrets: set cache.secret too (old secrets are only accepted beside a current one)",
            ),
        )
        require(
            (self.size_limit >= 1024 * 1024, f"cache.size_limit: must be at least 1MiB, got {self.size_limit}"),
            (
                self.eviction_policy in EVICTION_POLICIES,
                f"cache.eviction_policy: use one of {', '.join(EVICTION_POLICIES)}, got {self.eviction_policy!r}",
            ),
            (0 <= self.pin_fraction <= 1, f"cache.pin_fraction: must be in [0, 1], got {self.pin_fraction}"),
            (
                self.ttl is None or 0 < self.ttl <= MAX_TTL,
                f"cache.ttl: must be positive seconds up to 10 years, got {self.ttl}",
            ),
            (
                0 < self.max_entry_fraction <= 1,
                f"cache.max_entry_fraction: must be in (0, 1], got {self.max_entry_fraction}",
            ),
            (self.memory_bytes >= 0, f"cache.memory_bytes: must be >= 0, got {self.memory_bytes}"),
            (self.transcode_bytes >= 0, f"cache.transcode_bytes: must be >= 0, got {self.transcode_bytes}"),
            (self.lock_lease >= 1, f"cache.lock_lease: must be at least 1 second, got {self.lock_lease}"),
            (self.lock_timeout > 0, f"cache.lock_timeout: must be positive, got {self.lock_timeout}"),
            (
                self.shared_url is None or self.shared_url.startswith(("redis://", "rediss://", "unix://")),
                f"cache.shared_url: must start with redis://, rediss:// or unix://, got {self.shared_url!r}",
            ),
            (bool(self.dir.strip()), "cache.dir: must not be empty"),
            (self.stats_phrases >= 0, "cache.stats_phrases: must be >= 0"),
        )
        if self.objects_url is not None:
            from lib.config.objects import parse_objects_url  # the URL's rules; imports no client

            parse_objects_url(self.objects_url)


@dataclass(frozen=True)
class TextConfig:
    """Text limits and normalisation (``text:``)."""

    max_chars: int = 1000
    """Longest text accepted, after normalisation."""
    max_style_chars: int = 4096
    """Longest style instruction accepted (OpenAI's ``instructions`` go up to 4,096)."""
    fold_punctuation: bool = False
    """Fold Chinese full-width punctuation (，。！？：；“”) to ASCII before keying."""
    casefold: bool = False
    """Case-fold text before keying ("Hello" and "hello" share an entry)."""

    def __post_init__(self) -> None:
        require(
            (self.max_chars >= 1, f"text.max_chars: must be at least 1, got {self.max_chars}"),
            (self.max_style_chars >= 0, "text.max_style_chars: must be >= 0"),
        )


@dataclass(frozen=True)
class PromptConfig:
    """Prompt-audio limits (``prompt:``)."""

    min_seconds: float = 1.0
    """Shortest usable prompt."""
    max_seconds: float = 30.0
    """Longest usable prompt."""
    max_upload_bytes: int = 20 * 1024**2
    """Largest prompt upload accepted (HTTP 413 beyond it)."""
    memory_bytes: int = 32 * 1024**2
    """Byte budget of the in-memory memo of decoded prompts (accepted prompts only)."""

    def __post_init__(self) -> None:
        require(
            (0 < self.min_seconds < self.max_seconds, "prompt.min_seconds: must be > 0 and below prompt.max_seconds"),
            (self.max_upload_bytes > 0, "prompt.max_upload_bytes: must be positive"),
            (self.memory_bytes >= 0, "prompt.memory_bytes: must be >= 0"),
        )


@dataclass(frozen=True)
class VoicesConfig:
    """Voice library and voice-profile cache (``voices:``)."""

    memory_bytes: int = 32 * 1024**2
    """Byte budget of the in-memory LRU of voice profiles."""
    prewarm: bool = True
    """Load the profiles of all saved voices at start."""
    profile_bytes: int = 256 * 1024**2
    """Disk budget of voice profiles (derived data: LRU-evicted, emptied by clear; not saved voices)."""
    max_saved: int = 1000
    """Most voices the library holds (saving one more is refused until one is deleted)."""

    def __post_init__(self) -> None:
        require(
            (self.memory_bytes >= 0, "voices.memory_bytes: must be >= 0"),
            (
                self.profile_bytes >= 1024 * 1024,
                f"voices.profile_bytes: must be at least 1MiB, got {self.profile_bytes}",
            ),
            (self.max_saved >= 1, f"voices.max_saved: must be at least 1, got {self.max_saved}"),
        )


@dataclass(frozen=True)
class PreloadConfig:
    """Phrase lists (``preload:``): what a list may ask for."""

    max_requests: int = 10_000
    """Most requests one phrase list may expand to (seeds x styles of every phrase)."""
    prompt_dir: str | None = None
    """A folder of recordings any phrase list may use (an uploaded list: only this one)."""

    def __post_init__(self) -> None:
        require(
            (self.max_requests >= 1, f"preload.max_requests: must be at least 1, got {self.max_requests}"),
            (
                self.prompt_dir is None or bool(self.prompt_dir.strip()),
                "preload.prompt_dir: give a folder or null, not ''",
            ),
        )


@dataclass(frozen=True)
class BatchConfig:
    """Batch jobs (``batch:``): ``POST /api/batch``, made by every replica (docs/batch.md)."""

    lease_seconds: float = 60.0
    """With the Redis tier: an item a replica took and has not acknowledged for this long
    (the replica died) is taken over by another one (``XAUTOCLAIM``'s min-idle time); a
    replica at work on an item renews its claim every third of it."""

    def __post_init__(self) -> None:
        require((self.lease_seconds >= 1, f"batch.lease_seconds: must be at least 1 second, got {self.lease_seconds}"))


@dataclass(frozen=True)
class BuiltinConfig:
    """The built-in offline engine (``builtin:``)."""

    language: str = "auto"
    """``auto`` picks per run of script; or force ``cmn``, ``yue`` or ``en-us``."""
    base: str = "kokoro"
    """The voice the engine speaks with before the prompt's identity is matched on top:
    ``kokoro`` (Kokoro-82M, a neural voice; used where it is installed, else ``espeak``
    with one warning) or ``espeak`` (espeak-ng: fast, robotic). Part of the model version."""
    kokoro_voices: str | None = None
    """Folder of the Kokoro voice files (``kokoro-js`` 1.2.1 ``voices/*.bin``); null is
    where ``./run.sh`` unpacks them, ``<venv>/share/voice-tts/kokoro-js-1.2.1``."""
    threads: int = 0
    """Threads of one Kokoro synthesis; 0 is one per CPU core the process may use (at most 4)."""

    def __post_init__(self) -> None:
        require(
            (
                self.language in ("auto", "cmn", "yue", "en-us"),
                f"builtin.language: use auto, cmn, yue or en-us, got {self.language!r}",
            ),
            (self.base in ("kokoro", "espeak"), f"builtin.base: use kokoro or espeak, got {self.base!r}"),
            (
                self.kokoro_voices is None or bool(self.kokoro_voices.strip()),
                "builtin.kokoro_voices: must not be empty; give a folder or leave it null",
            ),
            (0 <= self.threads <= 64, f"builtin.threads: must be 0 (one per core) to 64, got {self.threads}"),
        )


@dataclass(frozen=True)
class CosyVoiceConfig:
    """The CosyVoice engine (``cosyvoice:``)."""

    model_dir: str | None = None
    """Local directory holding the model weights (nothing is ever downloaded)."""
    repo_dir: str | None = None
    """Upstream CosyVoice checkout to import from; null uses the installed package."""
    device: str = "auto"
    """``auto``, ``cpu`` or ``cuda``."""
    fp16: bool = False
    """Half precision on GPU."""
    prompt_cache_bytes: int = 256 * 1024**2
    """Byte budget of prompt features kept in the model's speaker table (an in-memory LRU;
    the features also persist in the voice cache, so an evicted voice costs one
    deserialisation, not a frontend run)."""
    fingerprint_file: str | None = None
    """JSON file remembering the model files' digests by path, size and modification time,
    so that the model version is hashed once per model file and start-up stays fast.
    Null uses ``$XDG_CACHE_HOME/voice-tts/cosyvoice-fingerprints.json`` (``~/.cache``)."""
    native_stream: bool = True
    """CosyVoice2/3: speak with upstream's own streaming (``stream=True``), so that a
    streamed request starts after the first ~25 speech tokens; the cached audio is the
    streamed audio. False: one upstream call per text segment (non-streaming quality).
    Part of the model version."""

    def __post_init__(self) -> None:
        # Checks of this section live here, beside its fields (the CosyVoice engine owns them).
        if self.prompt_cache_bytes < 0:
            raise ConfigError(f"cosyvoice.prompt_cache_bytes: must be >= 0, got {self.prompt_cache_bytes}")
        for key in ("model_dir", "repo_dir", "fingerprint_file"):
            value = getattr(self, key)
            if value is not None and not value.strip():
                raise ConfigError(f"cosyvoice.{key}: must not be empty; give a path or leave it null")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ConfigError(f"cosyvoice.device: use auto, cpu or cuda, got {self.device!r}")
        if self.fp16 and self.device == "cpu":
            raise ConfigError("cosyvoice.fp16: half precision needs cosyvoice.device cuda or auto, not cpu")


@dataclass(frozen=True)
class SegmentsConfig:
    """Long texts in sentence segments, and how every result is finished (``segments:``)."""

    max_chars: int = 80
    """Longest segment; a longer sentence is cut at a comma, else a space."""
    pause_sentence: float = 0.3
    """Seconds of silence after a segment that ends a sentence (。！？.!?)."""
    pause_clause: float = 0.15
    """Seconds of silence after a segment cut at a comma or a space."""
    crossfade: float = 0.01
    """Seconds of fade at every join (a crossfade where there is no pause)."""
    tail: float = 0.2
    """Seconds of silence at the end of every result."""
    loudness: float | None = -16.0
    """Loudness target of every result in LUFS (ITU-R BS.1770); null leaves the
    engine's levels."""

    def __post_init__(self) -> None:
        require(
            (10 <= self.max_chars <= 1000, f"segments.max_chars: must be 10 to 1000, got {self.max_chars}"),
            (0 <= self.pause_sentence <= 3, f"segments.pause_sentence: must be 0 to 3 s, got {self.pause_sentence}"),
            (0 <= self.pause_clause <= 3, f"segments.pause_clause: must be 0 to 3 s, got {self.pause_clause}"),
            (0 <= self.crossfade <= 0.1, f"segments.crossfade: must be 0 to 0.1 s, got {self.crossfade}"),
            (0 <= self.tail <= 5, f"segments.tail: must be 0 to 5 s, got {self.tail}"),
            (
                self.loudness is None or -40 <= self.loudness <= -5,
                f"segments.loudness: must be -40 to -5 LUFS or null, got {self.loudness}",
            ),
        )


@dataclass(frozen=True)
class TemplatesConfig:
    """Slot templates answered from cached pieces (``templates:``)."""

    file: str | None = "hot_phrases.json"
    """Phrase file whose ``templates`` the service answers, relative to the working
    directory; a missing file means no templates; null turns them off."""
    char_gap: float = 0.06
    """Seconds between the characters of a slot read character by character."""

    def __post_init__(self) -> None:
        if self.file is not None and not self.file.strip():
            raise ConfigError("templates.file: must not be empty; give a path or leave it null")
        if not 0 <= self.char_gap <= 1:
            raise ConfigError(f"templates.char_gap: must be 0 to 1 s, got {self.char_gap}")


@dataclass(frozen=True)
class AppConfig:
    """Everything the service reads at start."""

    engine: str = "builtin"
    """``builtin`` (offline, default), ``cosyvoice`` or ``tone`` (test double)."""
    cache: CacheConfig = field(default_factory=CacheConfig)
    text: TextConfig = field(default_factory=TextConfig)
    prompt: PromptConfig = field(default_factory=PromptConfig)
    voices: VoicesConfig = field(default_factory=VoicesConfig)
    preload: PreloadConfig = field(default_factory=PreloadConfig)
    batch: BatchConfig = field(default_factory=BatchConfig)
    builtin: BuiltinConfig = field(default_factory=BuiltinConfig)
    cosyvoice: CosyVoiceConfig = field(default_factory=CosyVoiceConfig)
    server: ServerConfig = field(default_factory=ServerConfig)
    segments: SegmentsConfig = field(default_factory=SegmentsConfig)
    templates: TemplatesConfig = field(default_factory=TemplatesConfig)
    provenance: ProvenanceConfig = field(default_factory=ProvenanceConfig)
    openai: OpenAIConfig = field(default_factory=OpenAIConfig)
    watchdog: WatchdogConfig = field(default_factory=WatchdogConfig)
    readings: ReadingsConfig = field(default_factory=ReadingsConfig)
    tenants: TenantsConfig = field(default_factory=TenantsConfig)

    def __post_init__(self) -> None:
        # Every section checks its own keys as it is built; this is the one top-level key.
        require(
            (self.engine in ENGINE_NAMES, f"engine: must be one of {', '.join(ENGINE_NAMES)}, got {self.engine!r}"),
        )

    def replace(self, overrides: Mapping[str, Any]) -> AppConfig:
        """A copy with dotted-key overrides applied (``{"cache.dir": "/x"}``);
        ``None`` values are skipped, so unset CLI flags change nothing."""
        data = dataclasses.asdict(self)
        for dotted, value in overrides.items():
            if value is None:
                continue
            assign(data, dotted, value)
        built: AppConfig = build(AppConfig, data, "", _SIZE_FIELDS)
        return built


#: The configuration file used when none is named: ``config.yaml`` in the working
#: directory, if there is one.
DEFAULT_CONFIG = "config.yaml"


def default_config_path(named: str | os.PathLike[str] | None = None) -> str | os.PathLike[str] | None:
    """``named`` if given, else ``config.yaml`` when it exists in the working
    directory, else None (built-in defaults and ``TTS_*`` variables only)."""
    if named is not None:
        return named
    return DEFAULT_CONFIG if Path(DEFAULT_CONFIG).is_file() else None


def load_config(
    path: str | os.PathLike[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> AppConfig:
    """Read ``path`` (optional), then ``TTS_*`` environment variables, then
    ``overrides`` (dotted keys, from the command line)."""
    data: dict[str, Any] = {}
    if path is not None:
        file = Path(path)
        if not file.is_file():
            raise ConfigError(f"config file {file} does not exist; pass --config with an existing file")
        try:
            loaded = yaml.safe_load(file.read_text(encoding="utf-8"))
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {file} is not valid YAML: {exc}") from exc
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"config file {file} must hold a mapping of keys, not {type(loaded).__name__}")
        data = loaded or {}
    for dotted, raw in env_values(AppConfig, os.environ if env is None else env, ENV_PREFIX).items():
        if dotted in _RAW_ENV:  # taken as written: YAML would read "0x1f..." as a number, "a: b" as a mapping
            assign(data, dotted, raw if raw.strip() else None)
            continue
        assign(data, dotted, yaml.safe_load(raw) if raw.strip() else None)
    config: AppConfig = build(AppConfig, data, "", _SIZE_FIELDS)
    return config.replace(overrides or {})
