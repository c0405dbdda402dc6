"""Mandarin readings in context (issue 27): polyphones by word and by context rule,
neutral and citation tones, shipped names, jieba's cache directory, memoisation,
determinism across processes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO

import lib.text
from lib.text.frontend import FrontEnd
from lib.text.mandarin import MandarinReader
from lib.text.polyphones import RULES


@pytest.fixture(scope="module")
def front(tmp_path_factory: pytest.TempPathFactory) -> FrontEnd:
    return FrontEnd(cache_dir=tmp_path_factory.mktemp("jieba"))


def syllables_of(front: FrontEnd, text: str, char: str, nth: int = 0) -> str:
    """The syllable read for the ``nth`` occurrence of ``char`` in ``text``."""
    units = [u for t in front.read(text).tokens if t.kind == "zh" for u in t.units]
    han = [ch for ch in text if "\u4e00" <= ch <= "\u9fff"]
    positions = [i for i, ch in enumerate(han) if ch == char]
    return units[positions[nth]]


@pytest.mark.parametrize(
    ("text", "char", "nth", "expected"),
    [
        # By word (jieba + pypinyin's phrase dictionary).
        ("银行营业厅在二楼", "行", 0, "hang2"),
        ("请绕行", "行", 0, "xing2"),
        ("列车长正在巡视车厢", "长", 0, "zhang3"),
        ("开往长沙南的列车", "长", 0, "chang2"),
        ("重复一遍，请重新排队", "重", 1, "chong2"),
        ("限重二十公斤", "重", 0, "zhong4"),
        ("航班调整", "调", 0, "tiao2"),
        ("调度中心", "调", 0, "diao4"),
        ("着陆时请勿解开安全带", "着", 0, "zhuo2"),
        # By context rule (the word alone cannot decide).
        ("请系好安全带", "系", 0, "ji4"),
        ("联系我们", "系", 0, "xi4"),
        ("数一数您的行李", "数", 0, "shu3"),
        ("数一数您的行李", "数", 1, "shu3"),
        ("人数很多", "数", 0, "shu4"),
        ("空调温度已调至26度", "调", 1, "tiao2"),
        ("本车还有空座位", "空", 0, "kong4"),
        ("本车还有空座位", "还", 0, "hai2"),
        ("请还书到还书处", "还", 0, "huan2"),
        ("我们得快点走了", "得", 0, "dei3"),
        ("他跑得很快", "得", 0, "de5"),
        ("他得了第一名", "得", 0, "de2"),
        ("请为老人让座", "为", 0, "wei4"),
        ("闭馆时间为17:00", "为", 0, "wei2"),
        ("请看好您的随身物品", "看", 0, "kan1"),
        ("这条路很长", "长", 0, "chang2"),
        ("他倔强地站着", "地", 0, "de5"),
        ("在地上", "地", 0, "di4"),
    ],
)
def test_polyphones_in_context(front: FrontEnd, text: str, char: str, nth: int, expected: str) -> None:
    assert syllables_of(front, text, char, nth) == expected


def test_context_rules_are_what_decides(front: FrontEnd, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the rules the model alone reads 系好 as xi4: the rules are the mechanism."""
    monkeypatch.setattr("lib.text.polyphones.RULES", ())
    bare = FrontEnd(memo_size=0)
    assert syllables_of(bare, "请系好安全带", "系") == "xi4"
    assert len(RULES) > 10


def test_neutral_and_citation_tones(front: FrontEnd) -> None:
    r = front.read("大家好，我是你们的导游。")
    assert r.reading == "da4 jia1 hao3 wo3 shi4 ni3 men5 de5 dao3 you2"
    # Citation tones: 一 and 不 keep tones 1 and 4 (sandhi is the engine's business),
    # third tones stay third (你好 is ni3 hao3).
    assert front.read("一遍").reading == "yi1 bian4"
    assert front.read("不大").reading == "bu4 da4"
    assert front.read("你好").reading == "ni3 hao3"
    assert front.read("乘客们").reading.endswith("men5")
    assert front.read("孩子").reading == "hai2 zi5"


def test_shipped_names_win_over_the_model(front: FrontEnd) -> None:
    r = front.read("前往洪洞县的旅客")
    assert "hong2 tong2" in r.reading
    assert any(t.source == "shipped" for t in r.tokens)
    assert front.read("下一站长春站").reading == "xia4 yi1 zhan4 chang2 chun1 zhan4"
    assert front.read("下一站：长治北站").reading == "xia4 yi1 zhan4 chang2 zhi4 bei3 zhan4"


def test_pauses_and_tokens(front: FrontEnd) -> None:
    r = front.read("处理完毕，请稍候。")
    assert [t.kind for t in r.tokens if t.kind == "pause"] == ["pause", "pause"]
    assert r.reading == "chu3 li3 wan2 bi4 qing3 shao1 hou4"
    assert r.spoken == "处理完毕,请稍候。"  # NFKC folds the full-width comma


def test_jieba_cache_goes_where_the_caller_says(tmp_path: Path) -> None:
    reader = MandarinReader(tmp_path / "text-cache")
    assert not (tmp_path / "text-cache").exists()  # nothing at construction
    reader.read("银行", 0, 2)
    cache = tmp_path / "text-cache" / "jieba.cache"
    assert cache.is_file() and cache.stat().st_mode & 0o077 == 0


def test_no_cache_dir_writes_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    MandarinReader(None).read("银行", 0, 2)
    assert list(tmp_path.iterdir()) == []


def test_read_is_memoised_and_bounded() -> None:
    front = FrontEnd(memo_size=2)
    first = front.read("请到1208房间")
    assert front.read("请到1208房间") is first
    front.read("银行")
    front.read("长沙")
    assert front.read("请到1208房间") is not first  # pushed out of the bounded memo
    assert front.read("请到1208房间") == first


def test_module_level_read_uses_the_shipped_lexicon() -> None:
    r = lib.text.read("前往洪洞县的旅客")
    assert "hong2 tong2" in r.reading and r.version.startswith("text")


_SCRIPT = """
import json, sys
from lib.text import read
texts = json.loads(sys.stdin.read())
print(json.dumps([[read(t).reading, read(t).version] for t in texts], ensure_ascii=False))
"""


def test_readings_are_the_same_in_another_process(front: FrontEnd) -> None:
    texts = ["请系好安全带。", "急救电话120。", "2025-12-31 14:30", "Gate C7 is now closed.", "数一数您的行李"]
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT], input=json.dumps(texts), capture_output=True, text=True, cwd=REPO,
        check=True, timeout=120,
    )  # fmt: skip
    assert json.loads(out.stdout) == [[front.read(t).reading, front.read(t).version] for t in texts]


def test_importing_the_front_end_loads_no_model() -> None:
    code = (
        "import sys, lib.text, lib.text.frontend; from lib.text.frontend import FrontEnd; f = FrontEnd(); "
        "f.key_part('六安'); print(sorted(m for m in ('jieba', 'pypinyin') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == "[]"


def _bench() -> object:
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_readings", REPO / "bench" / "bench_readings.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["held-out", "dev"])
def test_announcement_sets_are_read_right(front: FrontEnd, name: str) -> None:
    """The issue's targets on the held-out set (in the repo) and the dev set (shared/,
    when present): 95 % of sentences, every category 90 %, scored like score_readings.py."""
    bench: Any = _bench()
    path = bench.HELDOUT if name == "held-out" else bench.DEV
    if not path.exists():
        pytest.skip(f"{path} not found")
    score: dict[str, list[int]] = {}
    for cat, text, expected in bench.load(path):
        ok = bool(bench._compile_pattern(expected).match(bench._norm_reading(front.read(text).reading)))
        score.setdefault(cat, [0, 0])
        score[cat][0] += ok
        score[cat][1] += 1
    right = sum(v[0] for v in score.values())
    total = sum(v[1] for v in score.values())
    assert right >= 0.95 * total, score
    assert all(v[0] >= 0.9 * v[1] for v in score.values()), score


def test_latin_letters_with_diacritics_are_read_not_dropped() -> None:
    """``café`` is read as ``cafe`` (a letter the rules do not know used to vanish from
    the middle of the word: ``caf``); other scripts are left to the rules."""
    from lib.text import read

    assert [t.reading for t in read("café au lait").tokens] == ["cafe", "au", "lait"]
    assert [t.reading for t in read("Zoë 你好").tokens] == ["zoe", "ni3 hao3"]
    assert [t.reading for t in read("Straße").tokens] == ["strasse"]
