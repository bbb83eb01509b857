"""Requests shaped like a chat server's traffic, made offline, for distilling a chat model's draft.

The draft of an instruct model guesses the model's answers to requests, so it learns best from
answers to requests like the ones it will serve: short questions asking for a fact, requests to
write a function, word problems asking for the steps, and Chinese questions asking for an
explanation or a short poem. The corpus requests of `specmoe.zoo.chat_transcripts` ("summarize
this paragraph") and the zoo's synthetic questions cover other shapes; these fill the gap.

Each kind is a few request patterns over lists of subjects written for this module (and numbers
drawn from the seeded generator for word problems). None of them is a built-in benchmark prompt:
`chat_transcripts.instructions` drops any request containing one. The shapes resemble the
benchmark's four kinds on purpose (that is the traffic a served draft sees), so docs/findings.md
reports the draft's acceptance on the benchmark's prompts beside its agreement on held-out
requests of these shapes.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator

_FACT_PATTERNS = (
    "What is the capital of {country}?",
    "Which continent is {country} in?",
    "What is the chemical symbol for {element}?",
    "Who wrote {book}?",
    "What is {concept}? Answer in two sentences.",
    "Explain what {concept} is to a beginner.",
    "Why does {phenomenon}?",
    "How many {small} are in {big}?",
    "Name three facts about {animal}.",
    "What does {animal} eat, and where does it live?",
)
_COUNTRIES = (
    "Japan", "Kenya", "Peru", "Norway", "Egypt", "Australia", "Brazil", "India", "Italy", "Chile",
    "Vietnam", "Poland", "Ghana", "Mexico", "Sweden", "Turkey", "Argentina", "Thailand", "Spain",
    "Portugal", "Morocco", "Iceland", "Nepal", "Greece",
)  # fmt: skip
_ELEMENTS = (
    "silver", "iron", "sodium", "potassium", "copper", "lead", "tin", "mercury", "helium", "neon",
    "calcium", "zinc", "carbon", "oxygen", "nitrogen", "sulfur",
)  # fmt: skip
_BOOKS = (
    "Pride and Prejudice", "Hamlet", "The Odyssey", "War and Peace", "Don Quixote", "Moby-Dick",
    "Frankenstein", "Jane Eyre", "The Divine Comedy", "Great Expectations", "Macbeth",
    "The Old Man and the Sea", "A Tale of Two Cities", "Oliver Twist",
)  # fmt: skip
_CONCEPTS = (
    "a volcano", "a glacier", "a vaccine", "a black hole", "a rainbow", "an earthquake", "a magnet",
    "an atom", "a cell", "gravity", "evaporation", "a comet", "an eclipse", "a hurricane",
    "electricity", "a fossil", "the water cycle", "a desert", "a coral reef", "a neuron",
    "a semiconductor", "an ecosystem", "a tsunami", "a galaxy",
)  # fmt: skip
_PHENOMENA = (
    "the sky look blue", "ice float on water", "the Moon change shape during the month",
    "bread rise in the oven", "metal feel colder than wood", "the sea taste salty",
    "a compass point north", "thunder follow lightning", "leaves fall in autumn",
    "a balloon shrink in the cold", "salt melt ice on roads", "the Sun set in the west",
)  # fmt: skip
_UNITS = (
    ("centimeters", "a meter"), ("minutes", "a day"), ("seconds", "an hour"), ("days", "a leap year"),
    ("grams", "a kilogram"), ("milliliters", "a liter"), ("months", "two years"), ("weeks", "a year"),
    ("meters", "a kilometer"), ("hours", "a week"),
)  # fmt: skip
_ANIMALS = (
    "the giraffe", "the penguin", "the octopus", "the honey bee", "the elephant", "the dolphin",
    "the owl", "the camel", "the salmon", "the koala", "the wolf", "the tortoise",
)  # fmt: skip

_CODE_PATTERNS = (
    "Write a Python function that {task}.",
    "Write a Python function that {task}, with a docstring.",
    "Write a {language} function that {task}.",
    "Implement a function that {task} in Python and explain how it works.",
    "Write a Python function that {task}. Include two example calls.",
    "Write a SQL query that {query}.",
    "Write a Python class {name} with {methods}.",
)
_TASKS = (
    "checks whether a number is prime", "returns the factorial of n", "counts the vowels in a string",
    "merges two sorted lists into one sorted list", "removes duplicates from a list and keeps the order",
    "flattens a nested list", "computes the greatest common divisor of two integers",
    "converts a temperature from Celsius to Fahrenheit", "returns the second largest number in a list",
    "reverses the words in a sentence", "checks whether two strings are anagrams",
    "returns the sum of the digits of an integer", "counts the lines of a text file",
    "sorts a list of dictionaries by a given key", "returns the mean and the median of a list",
    "finds the most common word in a text", "converts a decimal number to binary",
    "checks whether a year is a leap year", "computes the power set of a list",
    "rotates a list by k positions", "returns the transpose of a matrix",
    "checks whether the brackets in a string are balanced", "computes the n-th triangular number",
    "capitalizes the first letter of every word",
)  # fmt: skip
_LANGUAGES = ("JavaScript", "C", "Go", "Rust", "Java", "C++")
_QUERIES = (
    "counts the orders placed in each month of 2023",
    "finds the employees who earn more than their manager",
    "returns the five most expensive products in each category",
    "lists the customers who have never placed an order",
    "computes the average rating of every book with at least ten reviews",
    "deletes duplicate rows from a table of email addresses",
)
_CLASSES = (
    ("Queue", "enqueue, dequeue and is_empty methods"),
    ("BankAccount", "deposit, withdraw and balance methods, refusing to overdraw"),
    ("Counter", "increment, decrement and reset methods"),
    ("Rectangle", "area and perimeter methods and a __repr__"),
    ("Temperature", "properties for Celsius and Fahrenheit"),
    ("LinkedList", "append, remove and __iter__ methods"),
    ("Timer", "start, stop and elapsed methods"),
    ("Matrix", "add, multiply and transpose methods"),
)

_PEOPLE = ("Lena", "Omar", "Priya", "Jonas", "Mei", "Carlos", "Aisha", "Tom", "Sara", "Ken")
_ITEMS = ("apples", "notebooks", "tickets", "cupcakes", "pencils", "bottles", "books", "stamps")
_ASKS = (
    "Explain each step.",
    "Show your work.",
    "Explain each step before giving the answer.",
    "Set up the calculation and check the result.",
)

_ZH_PATTERNS = (
    "请解释什么是{concept}。",
    "请用简单的语言解释{concept}是什么。",
    "为什么{phenomenon}？请用简单的语言解释。",
    "写一首关于{theme}的四行短诗。",
    "请用三句话介绍一下{place}。",
    "请给{person}提三条关于{topic}的建议。",
    "{concept}有什么用？请举两个例子。",
)
_ZH_CONCEPTS = (
    "地震", "彩虹", "疫苗", "黑洞", "潮汐", "火山", "冰川", "人工智能", "互联网", "万有引力",
    "电池", "细胞", "化石", "台风", "温室效应", "区块链", "太阳能", "声音",
)  # fmt: skip
_ZH_PHENOMENA = (
    "天空是蓝色的", "海水是咸的", "冬天白天比较短", "人会做梦", "冰会浮在水面上", "月亮会有圆缺",
    "打雷时先看到闪电", "面包会发霉", "鸟能在天上飞", "夏天比冬天热",
)  # fmt: skip
_ZH_THEMES = ("夏天的雨", "月亮", "大海", "故乡", "冬天的雪", "秋天的落叶", "夜晚的城市", "山间小路")
_ZH_PLACES = ("黄河", "泰山", "西湖", "长城", "上海", "西藏", "桂林山水", "黄山", "故宫", "青海湖")
_ZH_PEOPLE = ("刚上大学的学生", "第一次养猫的人", "想学做饭的年轻人", "准备跑马拉松的人", "刚开始工作的人")
_ZH_TOPICS = ("时间管理", "健康饮食", "学习外语", "节约用钱", "保持睡眠")


def _factual(rng: random.Random) -> str:
    small, big = rng.choice(_UNITS)
    return rng.choice(_FACT_PATTERNS).format(
        country=rng.choice(_COUNTRIES),
        element=rng.choice(_ELEMENTS),
        book=rng.choice(_BOOKS),
        concept=rng.choice(_CONCEPTS),
        phenomenon=rng.choice(_PHENOMENA),
        small=small,
        big=big,
        animal=rng.choice(_ANIMALS),
    )


def _code(rng: random.Random) -> str:
    name, methods = rng.choice(_CLASSES)
    return rng.choice(_CODE_PATTERNS).format(
        task=rng.choice(_TASKS),
        language=rng.choice(_LANGUAGES),
        query=rng.choice(_QUERIES),
        name=name,
        methods=methods,
    )


def _reasoning(rng: random.Random) -> str:
    who, item, ask = rng.choice(_PEOPLE), rng.choice(_ITEMS), rng.choice(_ASKS)
    a, b, c = rng.randint(12, 90), rng.randint(2, 9), rng.randint(3, 40)
    problems = (
        f"{who} has {a * b} {item} and gives a third of them away, then buys {c} more. "
        f"Later {who} sells half of what is left. How many {item} remain? {ask}",
        f"A car travels {a} kilometers in {b} hours and then {c} kilometers in one more hour. "
        f"What is its average speed over the whole trip? {ask}",
        f"A shirt costs {a} dollars. It is discounted by {b * 5} percent, and then a tax of {c % 10 + 5} "
        f"percent is added. What is the final price? {ask}",
        f"{who} is {b} times as old as a cousin. In {c} years {who} will be twice as old as the cousin. "
        f"How old are they now? {ask}",
        f"One machine fills {a} bottles an hour and a second fills {c} bottles an hour. How long do both "
        f"together need to fill {a * b + c} bottles? {ask}",
        f"A garden is {a} meters long and {b + 3} meters wide. A path {b % 3 + 2} meters wide runs "
        f"around it. What is the area of the path? {ask}",
    )
    return rng.choice(problems)


def _chinese(rng: random.Random) -> str:
    return rng.choice(_ZH_PATTERNS).format(
        concept=rng.choice(_ZH_CONCEPTS),
        phenomenon=rng.choice(_ZH_PHENOMENA),
        theme=rng.choice(_ZH_THEMES),
        place=rng.choice(_ZH_PLACES),
        person=rng.choice(_ZH_PEOPLE),
        topic=rng.choice(_ZH_TOPICS),
    )


KINDS: dict[str, Callable[[random.Random], str]] = {
    "factual": _factual,
    "code": _code,
    "reasoning": _reasoning,
    "chinese": _chinese,
}


def requests(seed: int = 0) -> Iterator[str]:
    """Requests of the four kinds in turn, endlessly (repeats possible: callers drop them)."""
    rng = random.Random(seed)
    while True:
        for make in KINDS.values():
            yield make(rng)
