"""Raw problem text -> tokens in the style of the training files, numbers kept whole.

Chinese: jieba's segmentation between numbers, every number (``(1/5)``, ``1(5/6)``, ``20%``,
``3.5``, ``1,200``, ``3:7``) one token, and Chinese numerals before a measure word (and 一半)
written in digits first, as the training files write them. English: words, numbers and
punctuation apart. Used for the texts ``solve`` reads and for problem files that give only an
``original_text`` (``hlgt.data.problems``); the benchmark files come segmented.
"""
from __future__ import annotations

import logging
import re

# One number as written, most specific form first (mixed number, bracketed fraction, ratio,
# thousands, decimal/integer with optional percent, bare fraction).
NUMBER = re.compile(
    r"\d+\(\d+/\d+\)"
    r"|\(\d+(?:\.\d+)?/\d+(?:\.\d+)?\)"
    r"|\d+(?:\.\d+)?(?:[:：]\d+(?:\.\d+)?)+"
    r"|\d{1,3}(?:,\d{3})+(?:\.\d+)?[%％]?"
    r"|\d+/\d+(?![\d./])"
    r"|\d+(?:\.\d+)?[%％]?"
)
_ENGLISH = re.compile(rf"{NUMBER.pattern}|[A-Za-z]+(?:'[A-Za-z]+)?|\S")

# Chinese numerals the training files write in digits: a run of numeral characters before a
# measure word ("三个", "十二本", "两千克") becomes its digits, "一半" becomes (1/2). Only before a
# measure word, so that words such as 一些, 一起 or 十分 keep their meaning.
_CN_DIGITS = {"零": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9}
_CN_UNITS = {"十": 10, "百": 100, "千": 1000, "万": 10000}
_NOT_NUMBERS = {"一", "百", "千", "万"}
_MEASURE_WORDS = "个只本支枝元角米克斤吨天年周岁人名位辆块棵条件张次页头匹箱袋盒瓶杯碗双层排行组套份倍道题朵根把间台架座"
# Shortest run (so that 两千克 is 2 千克), never starting inside a longer run.
_CN_CHARS = "".join(_CN_DIGITS) + "".join(_CN_UNITS)
_CN_NUMERAL = re.compile(rf"(?<![{_CN_CHARS}\d.])[{_CN_CHARS}]+?(?=[{_MEASURE_WORDS}]|千克|公斤|小时|分钟|厘米|千米|公里)")


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
    return _CN_NUMERAL.sub(lambda m: m.group() if m.group() in _NOT_NUMBERS else str(chinese_number(m.group())), text)


def tokenize(text: str, lang: str) -> list[str]:
    """Raw text → tokens in the style of the training files, numbers whole."""
    text = text.strip()
    if lang == "en":
        return _ENGLISH.findall(text)
    if lang != "zh":
        raise ValueError(f"unknown language {lang!r}; expected zh or en")
    text = chinese_numerals_to_digits(text)
    import jieba

    jieba.setLogLevel(logging.WARNING)  # its dictionary-loading chatter is not the answer

    tokens: list[str] = []
    last = 0
    for m in NUMBER.finditer(text):
        tokens += jieba.lcut(text[last:m.start()])
        tokens.append(m.group())
        last = m.end()
    tokens += jieba.lcut(text[last:])
    return [t for t in (t.strip() for t in tokens) if t]
