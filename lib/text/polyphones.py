"""Context rules for polyphones the word model reads wrong.

The reading model (:mod:`lib.text.mandarin`: jieba words, pypinyin's phrase
dictionary) decides a polyphone by the word it stands in. Where the word alone
cannot decide -- a one-character word whose reading depends on its grammatical role
(得 de/dei/de2, 为 wei2/wei4, 数 shu3/shu4, 还 hai2/huan2, 长 chang2/zhang3), or a
phrase that is not in the dictionary (系好安全带) -- these rules look at the
characters around it. Each rule names a linguistic cause, not a sentence: it is a
regular expression over the whole normalised text whose group ``t`` is the
character to read, and the reading it gets.

Neutral-tone particles (的 了 着 们 吗 呢 吧 啊 么) and the citation tones of 一 and 不
are in :data:`CITATION`: a reading is in citation tones, the engine applies sandhi.
"""

from __future__ import annotations

import re

__all__ = ["CITATION", "RULES", "context_readings"]

#: A subject right before (a look-behind: each alternative has a fixed width).
_PRONOUN = r"(?:(?<=[我你他她它您咱们谁])|(?<=大家|自己))"
_DEGREE = r"[很太真挺最更好多较越够蛮超特极]"
_PERSON = r"(?:您|你|我|他|她|它|大家|人民|旅客|乘客|顾客|客户|老人|孩子|各位|广大|群众|社会|国家|用户|患者)"
_VALUE = r"(?:-?\d|[零一二三四五六七八九十两百千万半负约])"

#: (why, pattern with group ``t``, reading of ``t``), tried in order; the first rule
#: that reads a character wins.
RULES: tuple[tuple[str, re.Pattern[str], str], ...] = tuple(
    (why, re.compile(pattern), reading)
    for why, pattern, reading in (
        # 得: 得 + 了 after a subject is 'obtained' (他得了第一名); after a subject and
        # before a verb it is 'must' (我们得走了); elsewhere the complement marker (跑得快).
        ("得 de2: obtained", rf"{_PRONOUN}(?P<t>得)(?=了|到|过)", "de2"),
        ("得 dei3: must", rf"{_PRONOUN}(?P<t>得)(?![了到过意知分罪])", "dei3"),
        ("得 de5: complement", r"(?<=[\u4e00-\u9fff])(?P<t>得)(?=[很太真挺更好不非越多快慢清早晚])", "de5"),
        # 地 after a reduplicated or two-character adverbial is the adverb marker (慢慢地).
        ("地 de5: after reduplication", r"(.)\1(?P<t>地)", "de5"),
        (
            "地 de5: after an adverbial",
            r"(?<=[强真心静细利序时觉貌好快速然续力断默悄轻勇极情切重慎松])(?P<t>地)"
            r"(?=[\u4e00-\u9fff])(?![方区面点图铁下上里址址带震球毯板])",
            "de5",
        ),
        # 为 'be/as' after a verb of naming or before a value (时间为17:00); 'for' before a person.
        ("为 wei4: for a person", rf"(?P<t>为)(?={_PERSON})", "wei4"),
        ("为 wei2: as", r"(?<=[选称改变视作分定评换译设化])(?P<t>为)", "wei2"),
        ("为 wei2: is a value", rf"(?<![因以认])(?P<t>为)(?={_VALUE}|[A-Z])", "wei2"),
        # 数 is 'count' (shu3) when it takes a count: 数一数, 数一下, 数清.
        ("数 shu3: count", r"(?P<t>数)(?=一?数|一下|一遍|清|不清|到\d|着)", "shu3"),
        ("数 shu3: count (reduplicated)", r"(?<=数一)(?P<t>数)", "shu3"),
        # 长 after a degree word is 'long' (很长的路); 长得/长大 are 'grow'.
        ("长 chang2: long", rf"(?<={_DEGREE})(?P<t>长)(?![大得成出高])", "chang2"),
        ("长 zhang3: grow", r"(?P<t>长)(?=得[很真太好高快])", "zhang3"),
        # 还 before what is returned is huan2 (还书, 还给, 还车).
        ("还 huan2: return", r"(?P<t>还)(?=[书钱款车贷清]|给|回(?!来了))", "huan2"),
        # 调 before a setting (调至26度, 调高, 调到最低) is tiao2 'adjust'.
        ("调 tiao2: adjust", rf"(?P<t>调)(?=[至到成为]?(?:{_VALUE}|最?[高低大小快慢亮暗])|[整节]|试)", "tiao2"),
        # 系 before what is tied (系好安全带, 系上鞋带) is ji4.
        ("系 ji4: tie", r"(?P<t>系)(?=[好上紧牢]?(?:安全带|鞋带|领带|红领巾|扣子|腰带|带子|绳))", "ji4"),
        # 看好 + a person or belongings is kan1 'look after'.
        (
            "看 kan1: look after",
            r"(?P<t>看)(?=[好管护住]?(?:您|你|自己|随身|行李|孩子|小孩|物品|财物|老人|儿童))",
            "kan1",
        ),
        # 空 before a place or seat is kong4 'vacant'.
        (
            "空 kong4: vacant",
            r"(?<![航天太领真高低防对虚悬凌落])(?P<t>空)(?=座|位|床位|余|地(?!铁)|缺|闲|档|隙|白)",
            "kong4",
        ),
        # 种 after a number or demonstrative is the measure word zhong3 (这种, 三种).
        ("种 zhong3: kind", r"(?<=[这那哪各每几某一二两三四五六七八九十多\d])(?P<t>种)", "zhong3"),
        # 处 after a place word is the noun chu4 (此处, 售票处).
        ("处 chu4: place", r"(?<=[此该本各某到别])(?P<t>处)(?![理置分罚方于事境世])", "chu4"),
        # 着 after 睡 is 'asleep' zhao2; after a verb before a noun phrase it is zhe5.
        ("着 zhao2: asleep", r"(?<=[睡点找猜])(?P<t>着)(?=了|$|。|，|,|\.)", "zhao2"),
        # 重 before a count of times is chong2 (重来一遍, 重播).
        ("重 chong2: again", r"(?P<t>重)(?=[新来播发复试写做选启装置申排印办])", "chong2"),
        # 行 before a measure of people is xing2; 行 as a row after a number is hang2.
        ("行 hang2: row", r"(?<=[\d第一二三四五六七八九十两几每])(?P<t>行)(?=[字，,。.]|$)", "hang2"),
    )
)

#: Readings that never depend on the word: the citation tones of 一 and 不, and the
#: neutral tone of particles when they stand alone as words.
CITATION: dict[str, str] = {
    "一": "yi1", "不": "bu4", "的": "de5", "了": "le5", "们": "men5", "吗": "ma5", "呢": "ne5", "吧": "ba5",
    "啊": "a5", "么": "me5", "着": "zhe5", "嘛": "ma5", "呀": "ya5", "哦": "o5", "啦": "la5",
}  # fmt: skip


def context_readings(text: str) -> dict[int, str]:
    """Position in ``text`` -> reading, for every polyphone a rule decides."""
    out: dict[int, str] = {}
    for _why, pattern, reading in RULES:
        for m in pattern.finditer(text):
            out.setdefault(m.start("t"), reading)
    return out
