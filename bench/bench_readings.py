"""Readings benchmark (issue 27): sentence accuracy per category before (raw espeak-ng)
and after (the text front end), front-end time per 100 characters, memory, install size.

    python bench/bench_readings.py                  # dev + held-out sets, all figures
    python bench/bench_readings.py --models         # also the reading-model comparison
    python bench/bench_readings.py --shipped        # which shipped entries the model misreads
    python bench/bench_readings.py --show-errors    # print every sentence got wrong

"Before" is measured, not guessed: the app's espeak-ng (lib/engines/builtin/espeak.py)
is asked for the phonemes it would say for the raw text (cmn voice for Chinese, en-us
for English). Mandarin phonemes are mapped back to pinyin with the inverse of
lib/text/espeak_input.py's syllable table (plus espeak's own forms of the 17 syllables
where it differs); English is compared as phonemes: espeak's phonemes of the raw text
against its phonemes of each accepted expected reading. Both sides are scored with the
matcher of ../shared/tools/score_readings.py (imported; a copy of its rules if absent).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import itertools
import re
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEV = ROOT.parent / "shared" / "testdata" / "readings-dev.tsv"
if not DEV.exists():
    DEV = Path("/work/shared/testdata/readings-dev.tsv")
HELDOUT = ROOT / "tests" / "data" / "readings-heldout.tsv"
POLYPHONES = ROOT / "tests" / "data" / "polyphones.tsv"


def _scorer() -> tuple[Callable[[str], Any], Callable[[str], str]]:
    for path in (ROOT.parent / "shared" / "tools" / "score_readings.py", Path("/work/shared/tools/score_readings.py")):
        if path.exists():
            spec = importlib.util.spec_from_file_location("score_readings", path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module.compile_pattern, module.norm_reading
    return _compile_pattern, _norm_reading


# A copy of score_readings.py's rules, used only when the shared tool is not there.
_MARKS = dict(zip("āáǎàēéěèīíǐìōóǒòūúǔùǖǘǚǜ", [(v, t) for v in "aeiouv" for t in (1, 2, 3, 4)], strict=True))


def _norm_token(t: str) -> str:
    import unicodedata

    t = unicodedata.normalize("NFC", t.lower()).replace("u:", "v").replace("ü", "v")
    tone, out = 0, []
    for ch in t:
        if ch in _MARKS:
            base, tn = _MARKS[ch]
            out.append(base)
            tone = tone or tn
        else:
            out.append(ch)
    s = "".join(out)
    return s + str(tone) if tone and not s[-1:].isdigit() else s


def _norm_reading(r: str) -> str:
    toks = [re.sub(r"^[^\w]+|[^\w]+$", "", _norm_token(t)) for t in re.split(r"[\s\-]+", r)]
    return " ".join(t for t in toks if t) + " "


def _tok(t: str) -> str:
    t = t.lower()
    if t.endswith("*"):
        return re.escape(t[:-1]) + "[1-5]"
    if re.fullmatch(r"[a-z]+5", t):
        return re.escape(t[:-1]) + "[1-5]?"
    return re.escape(t)


def _compile_pattern(p: str) -> re.Pattern[str]:
    parts = {"(": "(?:", "/": "|", ")": ")", "[": "(?:", "]": ")?"}
    out = [parts.get(t) or "(?:" + "|".join(_tok(a) for a in t.split("|")) + ") " for t in p.split()]
    return re.compile("^" + "".join(out) + "$")


def load(path: Path) -> list[tuple[str, str, str]]:
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            cat, text, expected = line.split("\t")
            rows.append((cat, text, expected))
    return rows


# --- before: raw espeak-ng -------------------------------------------------------------


class EspeakBefore:
    """What raw espeak-ng says, as reading tokens (Mandarin) or phonemes (English)."""

    def __init__(self) -> None:
        from lib.engines.builtin.espeak import EspeakSynth
        from lib.text.espeak_input import ESPEAK_DIFFERS, pinyin_phonemes
        from lib.text.syllables import SYLLABLES

        self.synth = EspeakSynth()
        units = [s + str(t) for s in SYLLABLES for t in range(1, 6)]
        espeak_own = self.synth.phonemes(", ".join(units), "cmn").splitlines()
        self.inverse: dict[str, str] = {}
        for unit, own in zip(units, espeak_own, strict=True):
            self.inverse.setdefault(_bare(pinyin_phonemes(unit)), unit)
            if unit.endswith("3"):
                # espeak's half third tone (21) before another syllable is still tone 3.
                self.inverse.setdefault(_bare(pinyin_phonemes(unit)).replace("214", "21"), unit)
            if unit[:-1] in ESPEAK_DIFFERS and "(en)" not in own:
                self.inverse.setdefault(_bare(own), unit)
        letters = [chr(c) for c in range(ord("A"), ord("Z") + 1)]
        for letter in letters:
            self.inverse.setdefault(_bare(self.synth.phonemes(letter, "en-us")), letter)
        self.longest = max(map(len, self.inverse))

    def close(self) -> None:
        self.synth.close()

    def mandarin(self, text: str) -> str:
        """Raw espeak's cmn phonemes of ``text`` mapped back to reading units."""
        out: list[str] = []
        for clause in self.synth.phonemes(text, "cmn").splitlines():
            for part in re.split(r"(\([a-z]+\))", clause):
                if part.startswith("("):
                    continue
                for word in part.replace("_|", " ").split():
                    out.append(self._segment(_bare(word)))
        return " ".join(out)

    def _segment(self, phones: str) -> str:
        # Dynamic programming over the inverse table: fewest units that cover the word.
        n = len(phones)
        best: list[tuple[int, list[str]] | None] = [None] * (n + 1)
        best[0] = (0, [])
        for i in range(n):
            if best[i] is None:
                continue
            cost, units = best[i]  # type: ignore[misc]
            for j in range(i + 1, min(n, i + self.longest) + 1):
                unit = self.inverse.get(phones[i:j])
                if unit is not None and (best[j] is None or best[j][0] > cost + 1):  # type: ignore[index]
                    best[j] = (cost + 1, [*units, unit])
        if best[n] is None:
            return f"<{phones}>"
        return " ".join(best[n][1])  # type: ignore[index]

    def english_ok(self, text: str, expected: str) -> bool:
        """Does raw espeak (en-us) say one of the expected readings? (as phonemes)"""
        said = _bare(self.synth.phonemes(text, "en-us"))
        return any(_bare(self.synth.phonemes(alt, "en-us")) == said for alt in _alternatives(expected))


def _bare(phonemes: str) -> str:
    """Phonemes without stress, pauses, spaces and language switches."""
    phonemes = re.sub(r"\([a-z]+\)", "", phonemes)
    # "." and ":" belong to phoneme names (ts. retroflex, i: long), so they stay.
    return re.sub(r"[\s'_|,!?]", "", phonemes)


def _alternatives(pattern: str, limit: int = 64) -> list[str]:
    """Every reading a pattern accepts (small patterns only): a|b, ( x / y ), [ x ]."""
    tokens = pattern.split()

    def parse(i: int) -> tuple[list[list[str]], int]:
        seqs: list[list[str]] = [[]]
        while i < len(tokens):
            t = tokens[i]
            if t in (")", "]", "/"):
                return seqs, i
            if t in ("(", "["):
                options: list[list[str]] = []
                i += 1
                while True:
                    sub, i = parse(i)
                    options.extend(sub)
                    if tokens[i] == "/":
                        i += 1
                        continue
                    break
                if t == "[":
                    options.append([])
                i += 1
            else:
                options = [[a.rstrip("*5") if a.endswith(("*", "5")) else a] for a in t.split("|")]
                i += 1
            seqs = [s + o for s, o in itertools.product(seqs, options)][:limit]
        return seqs, i

    return [" ".join(s) for s in parse(0)[0]]


# --- figures ---------------------------------------------------------------------------


def accuracy(rows: list[tuple[str, str, str]], say: Callable[[str, str, str], bool]) -> dict[str, list[int]]:
    score: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for cat, text, expected in rows:
        score[cat][0] += say(cat, text, expected)
        score[cat][1] += 1
    return score


def line(score: dict[str, list[int]]) -> str:
    right = sum(v[0] for v in score.values())
    n = sum(v[1] for v in score.values())
    cats = ", ".join(f"{c} {v[0]}/{v[1]}" for c, v in score.items())
    return f"{right}/{n} ({100 * right / n:.1f} %): {cats}"


def rss_kb() -> int:
    for row in Path("/proc/self/status").read_text().splitlines():
        if row.startswith("VmRSS:"):
            return int(row.split()[1])
    return 0


def installed_size(package: str) -> int:
    try:
        dist = importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        return 0
    total = 0
    for f in dist.files or []:
        path = Path(str(dist.locate_file(f)))
        if path.is_file():
            total += path.stat().st_size
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", action="store_true", help="compare candidate reading models on polyphones")
    parser.add_argument("--g2pm-path", default="", help="a directory where g2pM is installed (pip --target)")
    parser.add_argument("--shipped", action="store_true", help="check the shipped lexicon against the model")
    parser.add_argument("--show-errors", action="store_true")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    compile_pattern, norm_reading = _scorer()
    sets = [("dev", load(DEV)), ("held-out", load(HELDOUT))]

    rss0 = rss_kb()
    t0 = time.perf_counter()
    from lib.text.frontend import FrontEnd

    with tempfile.TemporaryDirectory() as cache:
        front = FrontEnd(cache_dir=cache, memo_size=0)
        front.warm()
        load_s = time.perf_counter() - t0
        rss1 = rss_kb()

        # Time per 100 characters: Chinese sentences of both sets joined into 100-character texts.
        corpus = "".join(text for _name, rows in sets for _c, text, _e in rows if re.search(r"[\u4e00-\u9fff]", text))
        chunks = [corpus[i : i + 100] for i in range(0, len(corpus) - 99, 100)]
        times: list[float] = []
        cpu: list[float] = []
        for _ in range(args.runs):
            for chunk in chunks:
                t, c = time.perf_counter(), time.process_time()
                front.read(chunk)
                times.append((time.perf_counter() - t) * 1000)
                cpu.append((time.process_time() - c) * 1000)
        times.sort()
        cpu.sort()
        key_times: list[float] = []
        for _ in range(args.runs):
            for _c, text, _e in sets[0][1]:
                t = time.perf_counter()
                front.key_part(text)
                key_times.append((time.perf_counter() - t) * 1e6)
        rss2 = rss_kb()
        # The same scan with an operator lexicon of 1,000 entries (the shipped names and made-up terms).
        from lib.text.lexicon import Lexicon, shipped_entries

        big = Lexicon(limit=2000)
        for e in shipped_entries():
            big.add(e.term, e.reading)
        for i in range(1000 - len(big)):
            big.add(f"术语{chr(0x4E00 + i)}", "shu4 yu3 yi1")
        front_big = FrontEnd(big, memo_size=0)
        front_big.key_part("预热")
        big_times: list[float] = []
        for _ in range(args.runs):
            for _c, text, _e in sets[0][1]:
                t = time.perf_counter()
                front_big.key_part(text)
                big_times.append((time.perf_counter() - t) * 1e6)

        def after(cat: str, text: str, expected: str) -> bool:
            got = front.read(text).reading
            ok = bool(compile_pattern(expected).match(norm_reading(got)))
            if not ok and args.show_errors:
                print(f"  after  [{cat}] {text}\n     got: {got}\n     exp: {expected}")
            return ok

        before_engine = EspeakBefore()

        def before(cat: str, text: str, expected: str) -> bool:
            if not re.search(r"[\u4e00-\u9fff]", text):
                return before_engine.english_ok(text, expected)
            got = before_engine.mandarin(text)
            ok = bool(compile_pattern(expected).match(norm_reading(got)))
            if not ok and args.show_errors:
                print(f"  before [{cat}] {text}\n     got: {got}\n     exp: {expected}")
            return ok

        for name, rows in sets:
            print(f"{name}: before (raw espeak-ng {before_engine.synth.version}): {line(accuracy(rows, before))}")
            print(f"{name}: after  (lib/text {front.version}): {line(accuracy(rows, after))}")
        before_engine.close()

    print(
        f"front-end time per 100 characters ({len(chunks)} texts x {args.runs} runs, model loaded once): "
        f"wall p50 {statistics.median(times):.2f} ms, p90 {times[int(0.9 * len(times))]:.2f} ms; "
        f"CPU p50 {statistics.median(cpu):.2f} ms, p90 {cpu[int(0.9 * len(cpu))]:.2f} ms "
        f"(wall above CPU is other processes on the machine); first load {load_s:.2f} s"
    )
    print(
        f"key_part (term scan) per dev text: p50 {statistics.median(key_times):.1f} us with an empty operator "
        f"lexicon, {statistics.median(big_times):.1f} us with 1,000 entries"
    )
    print(f"memory: RSS +{(rss1 - rss0) / 1024:.0f} MB after loading, +{(rss2 - rss0) / 1024:.0f} MB after the runs")
    sizes = {p: installed_size(p) for p in ("jieba", "pypinyin", "pyahocorasick")}
    print(
        "added install size: "
        + ", ".join(f"{p} {s / 1e6:.1f} MB" for p, s in sizes.items())
        + f"; total {sum(sizes.values()) / 1e6:.1f} MB"
    )
    if args.models:
        compare_models(args.g2pm_path)
    if args.shipped:
        check_shipped()


def compare_models(g2pm_path: str) -> None:
    """Polyphone accuracy of the candidate models on tests/data/polyphones.tsv."""
    import jieba
    from pypinyin import Style, lazy_pinyin
    from pypinyin.constants import PINYIN_DICT

    from lib.text.frontend import FrontEnd

    jieba.setLogLevel(60)
    rows = [
        (s, e.split())
        for s, e in (r.split("\t") for r in POLYPHONES.read_text("utf-8").splitlines() if r and r[0] != "#")
    ]
    front = FrontEnd(memo_size=0)

    def han(s: str) -> str:
        return "".join(ch for ch in s if "\u4e00" <= ch <= "\u9fff")

    def pyp(s: str) -> list[str]:
        return lazy_pinyin(han(s), style=Style.TONE3, neutral_tone_with_five=True)

    def jieba_pyp(s: str) -> list[str]:
        return [p for w in jieba.cut(han(s)) for p in lazy_pinyin(w, style=Style.TONE3, neutral_tone_with_five=True)]

    def ours(s: str) -> list[str]:
        return [u for t in front.read(s).tokens if t.kind == "zh" for u in t.units]

    models: list[tuple[str, Callable[[str], list[str]]]] = [
        ("pypinyin alone", pyp), ("jieba + pypinyin", jieba_pyp), ("lib/text (+ context rules)", ours),
    ]  # fmt: skip
    if g2pm_path:
        sys.path.insert(0, g2pm_path)
        from g2pM import G2pM

        g2pm = G2pM()
        models.insert(
            2, ("g2pM 0.1.2.5", lambda s: [p.replace("u:", "v") for p in g2pm(han(s), tone=True, char_split=False)])
        )
    print(f"polyphone accuracy on {POLYPHONES.name} (characters with 2+ readings in pypinyin's table, not 一/不):")
    for name, model in models:
        model(rows[0][0])
        n = ok = 0
        t = time.perf_counter()
        for sentence, expected in rows:
            got = model(sentence)
            for ch, g, e in zip(han(sentence), got, expected, strict=False):
                if "," in PINYIN_DICT.get(ord(ch), "") and ch not in "一不":
                    n += 1
                    ok += g == e or (e.endswith("5") and g[:-1] == e[:-1])
        ms = (time.perf_counter() - t) * 1000 / len(rows)
        print(f"  {name}: {ok}/{n} = {100 * ok / n:.1f} % ({ms:.2f} ms per sentence)")


def check_shipped() -> None:
    """Which shipped entries the model (without the lexicon) reads wrong."""
    from lib.text.lexicon import shipped_entries
    from lib.text.mandarin import MandarinReader

    bare = MandarinReader()
    wrong = [e for e in shipped_entries() if " ".join(bare.syllables(e.term)) != e.reading]
    print(f"shipped lexicon: {len(shipped_entries())} entries; the model alone misreads {len(wrong)}:")
    print("  " + ", ".join(f"{e.term} ({' '.join(bare.syllables(e.term))} -> {e.reading})" for e in wrong))


if __name__ == "__main__":
    main()
