"""Raw problem text -> tokens in the style of the training files, numbers kept whole.

The training files' own segmentations are the reference: a raw text should give the tokens and
above all the quantities its segmentation gives (Math23K's and MAWPS's original texts against
their segmented texts: tests/test_problems.py). Used for the texts ``solve`` reads and for problem
files that give only an ``original_text`` (``hlgt.data.problems``); the benchmark files come
segmented. Full-width digits (１２) and the minus sign (−, U+2212) read as their ASCII forms, and
a decimal without its leading zero (.5) as the files write it (0.5).

Chinese: jieba's segmentation between numbers, without its HMM (Math23K's files do not join
characters into words beyond jieba's dictionary: 张 明, not 张明), every number (``(1/5)``,
``1(5/6)``, ``20%``, ``3.5``, ``1,200``, ``3:7``) one token, a percent sign typed apart (``50 %``)
with it. As in Math23K's files, a bare ``a/b`` is a division (``a`` ``/`` ``b``: its fractions are
bracketed), digits right after a Latin letter stay in their word (``MP3``, ``C10``, ``m2``), a
minus is an operator, and Chinese numerals are words (第二天, 两人, 一半: the files never write
them in digits). A text without any number is the exception: its numerals before a measure word
(三个, 十二本, 两千克, 三点五千克) and 一半 become numbers, so that a problem written in characters
can be solved.

English: words, numbers and punctuation apart; as in MAWPS's files, clitics are words of their
own (``Emily 's``, ``do n't``), a title keeps its period (``Mrs.``), a minus right before a number
and after no word is its sign (``-2``), and ordinals (``1st``, ``8th``) and words with digits
(``mp3``, ``H1``) are one token each, not quantities.
"""
from __future__ import annotations

import logging
import re

# jieba is imported at the first Chinese text: it reads its dictionary, and English text and the GPU
# machines do without it.

# One number as written, most specific form first (mixed number, bracketed fraction, ratio,
# thousands, decimal/integer with optional percent); English also reads a bare fraction.
_NUMBER_FORMS = (
    r"\d+\(\d+/\d+\)"
    r"|\(\d+(?:\.\d+)?/\d+(?:\.\d+)?\)"
    r"|\d+(?:\.\d+)?(?:[:：]\d+(?:\.\d+)?)+"
    r"|\d{1,3}(?:,\d{3})+(?:\.\d+)?[%％]?"
    r"|\d+(?:\.\d+)?[%％]?"
)
_CHINESE_NUMBER = re.compile(rf"(?<![A-Za-z\d])(?:{_NUMBER_FORMS})")
_ENGLISH = re.compile(
    r"\d+(?i:st|nd|rd|th)\b"  # an ordinal
    r"|[A-Za-z]+\d[A-Za-z\d]*"  # a word with digits
    rf"|(?:(?<![\w).])-)?(?:\d+/\d+(?![\d./])|{_NUMBER_FORMS})"
    r"|(?:Mrs|Mr|Ms|Dr|St|Jr|Sr)\.(?!\w)"  # a title keeps its period
    r"|[A-Za-z]+(?=n['’]t\b)|n['’]t\b|['’](?:s|re|ve|ll|d|m)\b"  # clitics apart: do n't, Emily 's
    r"|[A-Za-z]+|\S"
)

# Chinese numerals of a text without numbers: a run of numeral characters before a measure word
# ("三个", "十二本", "两千克") becomes its digits, "一半" becomes (1/2). Only before a measure word,
# so that words such as 一些, 一起 or 十分 keep their meaning.
_CN_DIGITS = {"零": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9}
_CN_UNITS = {"十": 10, "百": 100, "千": 1000, "万": 10000}
_NOT_NUMBERS = {"一", "百", "千", "万"}
_MEASURE_WORDS = ("个只本支枝元角米克斤吨天年周岁人名位辆块棵条件张次页头匹箱袋盒瓶杯碗"
                  "双层排行组套份倍道题朵根把间台架座")
# Shortest run (so that 两千克 is 2 千克), never starting inside a longer run, with its decimals
# (三点五千克: 3.5 千克).
_CN_CHARS = "".join(_CN_DIGITS) + "".join(_CN_UNITS)
_CN_NUMERAL = re.compile(rf"(?<![{_CN_CHARS}\d.点])[{_CN_CHARS}]+?(?:点[{''.join(_CN_DIGITS)}]+)?"
                         rf"(?=[{_MEASURE_WORDS}]|千克|公斤|小时|分钟|厘米|千米|公里)")


def chinese_number(numeral: str) -> int:
    """"十二" → 12, "两千零五" → 2005, "三万" → 30000."""
    total, section, digit = 0, 0, 0
    for ch in numeral:
        if ch in _CN_DIGITS:
            digit = _CN_DIGITS[ch]
        elif ch == "万":
            total += (section + digit) * 10000
            section, digit = 0, 0
        else:
            section += (digit or 1) * _CN_UNITS[ch]
            digit = 0
    return total + section + digit


def chinese_numerals_to_digits(text: str) -> str:
    """A lone 一 stays a word: the training files write "一根绳子" (a rope) in characters and
    their equations do not use it. A lone 百, 千 or 万 is part of a unit (千克, 百米)."""
    text = text.replace("一半", "(1/2)")
    return _CN_NUMERAL.sub(lambda m: m.group() if m.group() in _NOT_NUMBERS else _digits(m.group()), text)


def _digits(numeral: str) -> str:
    """"十二" → "12", "三点五" → "3.5" (the decimals digit by digit, as written)."""
    whole, _, decimals = numeral.partition("点")
    return str(chinese_number(whole)) + ("." + "".join(str(_CN_DIGITS[ch]) for ch in decimals) if decimals else "")


# Signs a typesetter or a Chinese keyboard writes for ASCII ones: the minus sign (U+2212) and the
# full-width digits; the files write numbers in ASCII. Invisible characters (zero-width spaces and
# joiners, direction marks, a BOM inside the text) go: "1\u200b2" is the number 12, as it reads.
_ASCII_FORMS = str.maketrans({"\u2212": "-", **{chr(0xFF10 + d): str(d) for d in range(10)},
                              **dict.fromkeys([*range(0x200B, 0x2010), 0x2060, 0xFEFF, *range(0x202A, 0x202F)])})
# A decimal written without its leading zero (".5", "$.75"), as the files write it: "0.5". Not after
# a letter, a Chinese character or a digit: "千米.7小时" ends a sentence with its period.
_BARE_DECIMAL = re.compile(r"(?<![\w.])\.(?=\d)")
# A space before a percent sign (50 %): the Chinese files write 50% (MAWPS's English keeps 5 % apart).
_SPACED_PERCENT = re.compile(r"(?<=\d)\s+(?=[%％])")


def segmented_tokens(text: str) -> list[str]:
    """A file's segmented text as tokens (split on whitespace, as the files write them), its
    characters in the forms ``tokenize`` reads a raw text in."""
    return text.translate(_ASCII_FORMS).split()


def tokenize(text: str, lang: str) -> list[str]:
    """Raw text → tokens in the style of the training files, numbers whole."""
    text = _BARE_DECIMAL.sub("0.", text.strip().translate(_ASCII_FORMS))
    if lang == "en":
        return _ENGLISH.findall(text)
    if lang != "zh":
        raise ValueError(f"unknown language {lang!r}; expected zh or en")
    text = _SPACED_PERCENT.sub("", text)
    if not _CHINESE_NUMBER.search(text):
        text = chinese_numerals_to_digits(text)
    import jieba

    jieba.setLogLevel(logging.WARNING)  # its dictionary-loading chatter is not the answer

    tokens: list[str] = []
    last = 0
    for m in _CHINESE_NUMBER.finditer(text):
        tokens += jieba.lcut(text[last:m.start()], HMM=False)
        tokens.append(m.group())
        last = m.end()
    tokens += jieba.lcut(text[last:], HMM=False)
    return [t for t in (t.strip() for t in tokens) if t]
