"""Configuration: typed, validated, every error names its key; env and overrides."""

from __future__ import annotations

from pathlib import Path

import pytest

from lib.config import load_config, parse_size
from lib.errors import ConfigError


def test_defaults() -> None:
    config = load_config(env={})
    assert config.engine == "builtin"
    assert config.cache.dir == "cosyvoice_cache"
    assert config.cache.size_limit == 2 * 1024**3
    assert config.cache.eviction_policy == "cost-aware"
    assert config.text.max_chars == 1000


def test_yaml_then_env_then_overrides(tmp_path: Path) -> None:
    file = tmp_path / "config.yaml"
    file.write_text("engine: tone\ncache:\n  dir: from-yaml\n  size_limit: 500MB\n  ttl: 60\n")
    config = load_config(file, env={"TTS_CACHE_DIR": "from-env"}, overrides={"cache.ttl": 5, "engine": None})
    assert config.engine == "tone"
    assert config.cache.dir == "from-env"
    assert config.cache.size_limit == 500 * 1000**2
    assert config.cache.ttl == 5.0


@pytest.mark.parametrize(
    ("yaml_text", "named"),
    [
        ("cache:\n  sise_limit: 1GiB\n", "cache.sise_limit"),
        ("cache:\n  size_limit: lots\n", "cache.size_limit"),
        ("cache:\n  eviction_policy: random\n", "cache.eviction_policy"),
        ("engine: magic\n", "engine"),
        ("text:\n  max_chars: -1\n", "text.max_chars"),
        ("prompt:\n  min_seconds: 40\n", "prompt.min_seconds"),
        ("server:\n  port: 70000\n", "server.port"),
        ("cache:\n  store_text: maybe\n", "cache.store_text"),
        ("bogus: 1\n", "bogus"),
    ],
)
def test_bad_config_names_the_key(tmp_path: Path, yaml_text: str, named: str) -> None:
    file = tmp_path / "config.yaml"
    file.write_text(yaml_text)
    with pytest.raises(ConfigError) as info:
        load_config(file, env={})
    assert str(info.value).startswith(named + ":")


def test_bad_env_value_names_the_key() -> None:
    with pytest.raises(ConfigError, match=r"^cache\.memory_bytes:"):
        load_config(env={"TTS_CACHE_MEMORY_BYTES": "several"})


def test_sizes() -> None:
    assert parse_size("2GiB") == 2 * 1024**3
    assert parse_size("1.5 MB") == 1_500_000
    assert parse_size(123) == 123
    with pytest.raises(ConfigError):
        parse_size("2 parsecs")
