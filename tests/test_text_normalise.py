"""Text normalisation by context (issue 27): each class of Chinese and English
convention, read through the whole front end so the tokens are what an engine gets."""

from __future__ import annotations

import pytest

from lib.text.frontend import FrontEnd
from lib.text.numbers import en_ordinal, en_year, zh_int, zh_number


@pytest.fixture(scope="module")
def front(tmp_path_factory: pytest.TempPathFactory) -> FrontEnd:
    return FrontEnd(cache_dir=tmp_path_factory.mktemp("jieba"))


def reading(front: FrontEnd, text: str) -> str:
    return front.read(text).reading


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Codes: a letter with digits, digit by digit, 1 as yao1.
        ("请C045号", "qing3 C ling2 si4 wu3 hao4"),
        ("G1234次", "G yao1 er4 san1 si4 ci4"),
        ("航班CA1831", "hang2 ban1 C A yao1 ba1 san1 yao1"),
        # Room numbers, verification codes, leading zeros.
        ("请到1208房间", "qing3 dao4 yao1 er4 ling2 ba1 fang2 jian1"),
        ("请到305室", "qing3 dao4 san1 ling2 wu3 shi4"),
        ("验证码是520131", "yan4 zheng4 ma3 shi4 wu3 er4 ling2 yao1 san1 yao1"),
        ("编号023", "bian1 hao4 ling2 er4 san1"),
    ],
)
def test_codes_are_read_digit_by_digit(front: FrontEnd, text: str, expected: str) -> None:
    assert reading(front, text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("拨打110", "bo1 da3 yao1 yao1 ling2"),
        ("急救电话120。", "ji2 jiu4 dian4 hua4 yao1 er4 ling2"),
        ("请拨打12345反映问题", "qing3 bo1 da3 yao1 er4 san1 si4 wu3 fan3 ying4 wen4 ti2"),
        ("客服95588", "ke4 fu2 jiu3 wu3 wu3 ba1 ba1"),
        ("热线400-820-8820", "re4 xian4 si4 ling2 ling2 ba1 er4 ling2 ba1 ba1 er4 ling2"),
        ("13812345678", "yao1 san1 ba1 yao1 er4 san1 si4 wu3 liu4 qi1 ba1"),
    ],
)
def test_phone_and_emergency_numbers_say_yao(front: FrontEnd, text: str, expected: str) -> None:
    assert reading(front, text) == expected


def test_a_service_number_before_a_unit_is_a_quantity(front: FrontEnd) -> None:
    assert reading(front, "押金120元") == "ya1 jin1 yi1 bai3 er4 shi2 yuan2"


def test_phone_token_is_pinned_and_spoken_with_yao(front: FrontEnd) -> None:
    token = next(t for t in front.read("急救电话120").tokens if t.text == "120")
    assert (token.spoken, token.reading, token.source, token.pinned) == ("幺二零", "yao1 er4 ling2", "rule", True)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026年", "er4 ling2 er4 liu4 nian2"),
        ("1998年", "yi1 jiu3 jiu3 ba1 nian2"),
        ("3月15日", "san1 yue4 shi2 wu3 ri4"),
        ("2025-12-31", "er4 ling2 er4 wu3 nian2 shi2 er4 yue4 san1 shi2 yi1 ri4"),
        ("2月", "er4 yue4"),
    ],
)
def test_years_and_dates(front: FrontEnd, text: str, expected: str) -> None:
    assert reading(front, text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("14:30", "shi2 si4 dian3 san1 shi2"),
        ("9:00", "jiu3 dian3"),
        ("8:05", "ba1 dian3 ling2 wu3"),
        ("23:10", "er4 shi2 san1 dian3 yi1 shi2"),
        ("2:00", "liang3 dian3"),
    ],
)
def test_times(front: FrontEnd, text: str, expected: str) -> None:
    assert reading(front, text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("99.9元", "jiu3 shi2 jiu3 dian3 jiu3 yuan2"),
        ("128.50元", "yi1 bai3 er4 shi2 ba1 dian3 wu3 yuan2"),
        ("¥2300", "liang3 qian1 san1 bai3 yuan2"),
        ("65%", "bai3 fen1 zhi1 liu4 shi2 wu3"),
        ("2.5米", "er4 dian3 wu3 mi3"),
        ("3/4", "si4 fen1 zhi1 san1"),
        ("气温-5℃", "qi4 wen1 ling2 xia4 wu3 she4 shi4 du4"),
        ("温度-5℃", "wen1 du4 ling2 xia4 wu3 she4 shi4 du4"),
        ("重20kg", "zhong4 er4 shi2 gong1 jin1"),
        ("约3.5km", "yue1 san1 dian3 wu3 gong1 li3"),
        ("前方500m", "qian2 fang1 wu3 bai3 mi3"),
        ("1,000人", "yi1 qian1 ren2"),
    ],
)
def test_values(front: FrontEnd, text: str, expected: str) -> None:
    assert reading(front, text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2件", "liang3 jian4"),
        ("2个人", "liang3 ge4 ren2"),
        ("第2车厢", "di4 er4 che1 xiang1"),
        ("2号", "er4 hao4"),
        ("12件", "shi2 er4 jian4"),
        ("2000米", "liang3 qian1 mi3"),
    ],
)
def test_liang_before_measure_words_only(front: FrontEnd, text: str, expected: str) -> None:
    assert reading(front, text) == expected


def test_letters_inside_chinese(front: FrontEnd) -> None:
    tokens = front.read("请出示您的ID卡").tokens
    letters = next(t for t in tokens if t.text == "ID")
    assert (letters.kind, letters.reading) == ("letters", "I D")
    assert front.read("通过Email发送").reading == "tong1 guo4 email fa1 song4"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Gate C7 is now closed.", "gate C seven is now closed"),
        ("The fare is $12.", "the fare is twelve dollars"),
        ("Your total is $25.50.", "your total is twenty five dollars and fifty cents"),
        ("Boarding starts at 9:15.", "boarding starts at nine fifteen"),
        ("It opens at 9:00.", "it opens at nine o'clock"),
        ("Call 110 for the police.", "call one one zero for the police"),
        ("Room 404 is on the 4th floor.", "room four zero four is on the fourth floor"),
        ("The 21st and the 2nd.", "the twenty first and the second"),
        ("The museum opened in 1998.", "the museum opened in nineteen ninety eight"),
        ("Dr. Smith", "doctor smith"),
        ("No. 5 bus from St. James Street", "number five bus from saint james street"),
        ("Main St. is closed", "main street is closed"),
        ("Flight CA1831", "flight C A one eight three one"),
        ("Seat B12", "seat B one two"),
        ("Show your ID.", "show your I D"),
        ("We have 250 seats.", "we have two hundred and fifty seats"),
        ("It is 3.5km away and 20kg.", "it is three point five kilometres away and twenty kilograms"),
        ("It is -5°C outside.", "it is minus five degrees celsius outside"),
        ("Save 20% today.", "save twenty percent today"),
    ],
)
def test_english(front: FrontEnd, text: str, expected: str) -> None:
    assert reading(front, text) == expected


def test_number_readers() -> None:
    assert zh_int(10010) == "一万零一十"
    assert zh_int(2, liang=True) == "两" and zh_int(20, liang=True) == "二十"
    assert zh_number("-3.05") == "负三点零五"
    assert en_year(2005) == "two thousand five" and en_year(2025) == "twenty twenty-five"
    assert en_year(1905) == "nineteen oh five" and en_ordinal(12) == "twelfth"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Train 4512, platform 7, now.", ["train", "four five one two", ",", "platform", "seven", ",", "now"]),
        ("It costs $4,500, thanks.", ["it", "costs", "four thousand five hundred dollars", ",", "thanks"]),
        ("We have 4,512 seats.", ["we", "have", "four thousand five hundred and twelve", "seats"]),
    ],
)
def test_a_comma_after_an_english_number_stays_a_pause(front: FrontEnd, text: str, expected: list[str]) -> None:
    """A number's digits take a comma only between digit groups: the comma after it is the
    clause's pause (it once vanished into the number, and the clause ran on)."""
    tokens = [t for t in front.read(text).tokens if t.reading != "."]
    assert [t.reading.strip() for t in tokens] == expected
