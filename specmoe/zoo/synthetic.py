"""Text the project generates for the trained zoo: questions with answers, worked arithmetic, small
Python functions, and Chinese questions with answers, in the four shapes of the benchmark's prompt
kinds (factual, code, reasoning, chinese).

Why: a family trained only on the package corpus and the standard library meets a benchmark question
as text it has never seen the like of, and its greedy continuation degenerates into loops. With
these, a target answers in a recognisable form, and its drafts agree with it on the form (template
words, punctuation, code syntax) and not always on the content (numbers, names): the easy and hard
tokens of a real model family. None of the built-in benchmark prompts is generated here (and
`train_data` drops any paragraph containing one anyway).

Choices come from `random.Random(seed).random()`, whose sequence Python keeps stable across versions,
so the text depends on the seed alone.
"""

import random
from collections.abc import Callable, Iterator

# (country, capital, continent, 国家, 首都, 大洲)
COUNTRIES: tuple[tuple[str, str, str, str, str, str], ...] = (
    ("France", "Paris", "Europe", "法国", "巴黎", "欧洲"),
    ("Germany", "Berlin", "Europe", "德国", "柏林", "欧洲"),
    ("Italy", "Rome", "Europe", "意大利", "罗马", "欧洲"),
    ("Spain", "Madrid", "Europe", "西班牙", "马德里", "欧洲"),
    ("Portugal", "Lisbon", "Europe", "葡萄牙", "里斯本", "欧洲"),
    ("Greece", "Athens", "Europe", "希腊", "雅典", "欧洲"),
    ("Norway", "Oslo", "Europe", "挪威", "奥斯陆", "欧洲"),
    ("Poland", "Warsaw", "Europe", "波兰", "华沙", "欧洲"),
    ("Egypt", "Cairo", "Africa", "埃及", "开罗", "非洲"),
    ("Kenya", "Nairobi", "Africa", "肯尼亚", "内罗毕", "非洲"),
    ("Morocco", "Rabat", "Africa", "摩洛哥", "拉巴特", "非洲"),
    ("Japan", "Tokyo", "Asia", "日本", "东京", "亚洲"),
    ("India", "New Delhi", "Asia", "印度", "新德里", "亚洲"),
    ("Thailand", "Bangkok", "Asia", "泰国", "曼谷", "亚洲"),
    ("Vietnam", "Hanoi", "Asia", "越南", "河内", "亚洲"),
    ("South Korea", "Seoul", "Asia", "韩国", "首尔", "亚洲"),
    ("Brazil", "Brasilia", "South America", "巴西", "巴西利亚", "南美洲"),
    ("Argentina", "Buenos Aires", "South America", "阿根廷", "布宜诺斯艾利斯", "南美洲"),
    ("Peru", "Lima", "South America", "秘鲁", "利马", "南美洲"),
    ("Mexico", "Mexico City", "North America", "墨西哥", "墨西哥城", "北美洲"),
    ("Cuba", "Havana", "North America", "古巴", "哈瓦那", "北美洲"),
    ("New Zealand", "Wellington", "Oceania", "新西兰", "惠灵顿", "大洋洲"),
)
# (element, symbol, atomic number)
ELEMENTS: tuple[tuple[str, str, int], ...] = (
    ("hydrogen", "H", 1),
    ("helium", "He", 2),
    ("carbon", "C", 6),
    ("nitrogen", "N", 7),
    ("oxygen", "O", 8),
    ("sodium", "Na", 11),
    ("silicon", "Si", 14),
    ("sulfur", "S", 16),
    ("calcium", "Ca", 20),
    ("iron", "Fe", 26),
    ("copper", "Cu", 29),
    ("zinc", "Zn", 30),
    ("silver", "Ag", 47),
    ("tin", "Sn", 50),
    ("lead", "Pb", 82),
)
# (smaller unit, larger unit, how many of the smaller make one larger)
UNITS: tuple[tuple[str, str, int], ...] = (
    ("minutes", "hours", 60),
    ("seconds", "minutes", 60),
    ("days", "weeks", 7),
    ("months", "years", 12),
    ("centimeters", "meters", 100),
    ("meters", "kilometers", 1000),
    ("grams", "kilograms", 1000),
)
NAMES = ("Maria", "Tom", "Lena", "Omar", "Yuki", "Ravi", "Sofia", "Ben", "Amara", "Jonas")
ITEMS = ("apples", "pencils", "books", "marbles", "stamps", "cookies", "tickets", "boxes")
VEHICLES = ("car", "bus", "train", "cyclist", "boat")
ASK_STEPS = ("", " Explain each step.", " Show your work.", " Reason step by step.")
# (name, measure word, item) for the Chinese word problems
ZH_NAMES = ("小明", "小红", "小华", "小李", "王老师", "张阿姨")
ZH_ITEMS = (("个", "苹果"), ("支", "铅笔"), ("本", "书"), ("块", "糖"), ("张", "邮票"))


class Picker:
    """Seeded choices built on random() alone, the one part of `random` stable across versions."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)

    def int(self, low: int, high: int) -> int:
        """A whole number in [low, high]."""
        return low + int(self._rng.random() * (high - low + 1))

    def pick(self, options: tuple):
        return options[int(self._rng.random() * len(options))]


def factual(p: Picker) -> str:
    country, capital, continent, *_ = p.pick(COUNTRIES)
    element, symbol, number = p.pick(ELEMENTS)
    small, large, factor = p.pick(UNITS)
    n = p.int(2, 12)
    return p.pick(
        (
            f"Question: What is the capital of {country}?\nAnswer: The capital of {country} is {capital}.",
            f"Question: On which continent is {country}?\nAnswer: {country} is in {continent}.",
            f"Question: Which country has {capital} as its capital?\n"
            f"Answer: {capital} is the capital of {country}.",
            f"Question: What is the chemical symbol for {element}?\n"
            f"Answer: The symbol for {element} is {symbol}.",
            f"Question: What is the atomic number of {element}?\n"
            f"Answer: The atomic number of {element} is {number}.",
            f"Question: How many {small} are in {n} {large}?\n"
            f"Answer: There are {n * factor} {small} in {n} {large}.",
        )
    )


def reasoning(p: Picker) -> str:
    name, item, vehicle = p.pick(NAMES), p.pick(ITEMS), p.pick(VEHICLES)
    a, b, c = p.int(20, 90), p.int(2, 19), p.int(2, 19)
    speed, hours, friends = p.int(3, 12) * 10, p.int(2, 6), p.int(2, 6)
    price, count = p.int(2, 9), p.int(2, 8)
    note = ((price * count) // 10 + 1) * 10
    ask = p.pick(ASK_STEPS)
    share, left = a // friends, a % friends
    cost, area = price * count, b * (c + b)
    return p.pick(
        (
            f"Problem: A shop has {a} {item}. It sells {b} in the morning and gets {c} more in the "
            f"afternoon. How many {item} does it have in the evening?{ask}\nSolution: Let us reason "
            f"step by step. After the morning it has {a} - {b} = {a - b} {item}. After the delivery it "
            f"has {a - b} + {c} = {a - b + c}. The answer is {a - b + c}.",
            f"Problem: A {vehicle} travels at {speed} kilometers per hour for {hours} hours. How far "
            f"does it go?{ask}\nSolution: Distance is speed times time: {speed} * {hours} = "
            f"{speed * hours} kilometers. The answer is {speed * hours} kilometers.",
            f"Problem: {name} has {a} {item} and shares them equally among {friends} friends. How many "
            f"does each friend get, and how many are left?{ask}\nSolution: {a} / {friends} is {share} "
            f"with {left} left over, because {friends} * {share} = {friends * share}. Each friend gets "
            f"{share} {item} and {left} are left.",
            f"Problem: {name} buys {count} {item} at {price} dollars each and pays with a {note}-dollar "
            f"note. How much change does {name} get?{ask}\nSolution: The {item} cost {count} * {price} = "
            f"{cost} dollars. The change is {note} - {cost} = {note - cost} dollars. The answer is "
            f"{note - cost} dollars.",
            f"Problem: A garden is {b} meters wide and {c + b} meters long. What is its area?{ask}\n"
            f"Solution: The area of a rectangle is width times length: {b} * {c + b} = {area} square "
            f"meters. The answer is {area} square meters.",
        )
    )


def code(p: Picker) -> str:
    name = p.pick(("values", "numbers", "items", "data"))
    reduce_name, start, update, what = p.pick(
        (
            ("total", "0", "result += x", "sum"),
            ("product", "1", "result *= x", "product"),
            ("count_positive", "0", "result += 1 if x > 0 else 0", "number of positive values"),
            ("count_even", "0", "result += 1 if x % 2 == 0 else 0", "number of even values"),
        )
    )
    pred_name, test = p.pick(
        (("is_even", "n % 2 == 0"), ("is_odd", "n % 2 == 1"), ("is_square", "int(n ** 0.5) ** 2 == n"))
    )
    char_kind, chars = p.pick((("vowels", '"aeiou"'), ("digits", '"0123456789"'), ("spaces", '" "')))
    return p.pick(
        (
            f"Write a Python function {reduce_name}({name}) that returns the {what} of a list.\n\n"
            f"def {reduce_name}({name}):\n"
            f'    """Return the {what} of {name}."""\n'
            f"    result = {start}\n    for x in {name}:\n        {update}\n    return result\n",
            f"Write a Python function {pred_name}(n) that returns True or False.\n\n"
            f"def {pred_name}(n):\n    return {test}\n",
            f"Write a Python function count_{char_kind}(text) that counts the {char_kind} in a string.\n\n"
            f"def count_{char_kind}(text):\n"
            f'    """Return how many characters of text are {char_kind}."""\n'
            f"    return sum(1 for ch in text.lower() if ch in {chars})\n",
            f"Write a Python function largest({name}) that returns the largest value, or None for an "
            f"empty list.\n\ndef largest({name}):\n    if not {name}:\n        return None\n"
            f"    best = {name}[0]\n"
            f"    for x in {name}[1:]:\n        if x > best:\n            best = x\n    return best\n",
        )
    )


def chinese(p: Picker) -> str:
    _, _, _, country, capital, continent = p.pick(COUNTRIES)
    name, (measure, item) = p.pick(ZH_NAMES), p.pick(ZH_ITEMS)
    a, b, c = p.int(10, 60), p.int(2, 20), p.int(2, 9)
    return p.pick(
        (
            f"问：{country}的首都是哪里？\n答：{country}的首都是{capital}。",
            f"问：{country}位于哪个大洲？\n答：{country}位于{continent}。",
            f"问：{a}加{b}等于多少？\n答：{a}加{b}等于{a + b}。",
            f"问：{a}减{b}等于多少？\n答：{a}减{b}等于{a - b}。",
            f"{name}有{a}{measure}{item}，又买了{b}{measure}，然后送给朋友{c}{measure}。{name}现在有多少{measure}"
            f"{item}？请写出计算过程。\n解答：先算买了以后的数量：{a}+{b}={a + b}。再减去送出的：{a + b}-{c}="
            f"{a + b - c}。所以{name}现在有{a + b - c}{measure}{item}。",
        )
    )


GENERATORS: dict[str, Callable[[Picker], str]] = {
    "factual": factual,
    "reasoning": reasoning,
    "code": code,
    "chinese": chinese,
}


def documents(kind: str, seed: int = 0) -> Iterator[str]:
    """An endless stream of documents of one kind; kinds draw from separately seeded pickers."""
    picker = Picker(seed * len(GENERATORS) + list(GENERATORS).index(kind))
    while True:
        yield GENERATORS[kind](picker)
