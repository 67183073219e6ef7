"""The built-in prompt set, made deterministically: ``python -m specwatch.load.promptset`` rewrites
``src/specwatch/data/prompts.jsonl`` (a unit test checks that the shipped file is this output).

Several hundred prompts of specwatch's own making, one JSON object a line with a ``category``:

| category | count | what |
|---|---|---|
| code | 130 | write, fix, explain or translate code (Python, Rust, Go, TypeScript, C++, SQL), some with code |
| math | 130 | arithmetic word problems, equations, series, probability, short proofs |
| chat | 110 | chat ``messages`` (system, user, some with an earlier exchange) on everyday topics |
| summarisation | 80 | a made-up report, news item or study of 100-250 words, to be summarised |
| long-context | 50 | a transcript, log, or multi-section document of 500-1000 words, then a question about it |

Accept length, and so whether speculation pays, depends on the prompts: code and math are easier to
draft than open chat; long context stresses prefill. Only the standard library's seeded
``random.Random`` is used (its choice/randint/shuffle sequences are stable across Python versions).
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

SEED = 16
COUNTS = {"code": 130, "math": 130, "chat": 110, "summarisation": 80, "long-context": 50}

_LANGS = ("Python", "Rust", "Go", "TypeScript", "C++", "SQL")
_TASKS = (
    "returns the n-th Fibonacci number using an iterative loop",
    "checks whether a string is a palindrome, ignoring case and punctuation",
    "merges two sorted lists into one sorted list",
    "counts how often each word occurs in a text and returns the ten most common",
    "parses an ISO 8601 date and returns the day of the week",
    "finds the longest common prefix of a list of strings",
    "implements binary search over a sorted array and returns the index or -1",
    "flattens an arbitrarily nested list of integers",
    "computes a moving average over a window of k values",
    "validates an IPv4 address given as a string",
    "groups records by a key and sums a numeric field per group",
    "implements an LRU cache with a fixed capacity",
    "rotates a square matrix by 90 degrees in place",
    "reads a CSV file and reports the mean and standard deviation of each numeric column",
    "detects a cycle in a directed graph given as an adjacency list",
    "retries an HTTP request with exponential backoff and jitter",
    "splits a list into chunks of at most n elements",
    "converts a Roman numeral to an integer",
    "computes the edit distance between two strings",
    "schedules tasks with dependencies in topological order",
)
_SQL_TASKS = (
    "lists the five customers with the highest total order value in 2025",
    "finds products that were never ordered",
    "computes each month's revenue and its change from the previous month",
    "returns the second highest salary in each department",
    "counts active users per day over the last thirty days",
)
_VERBS = ("Write", "Implement", "Write a well-tested version of", "Sketch")
_NAMES = ("alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "theta")
_TOPICS = ("planning a week-long trip to Portugal on a budget", "learning to bake sourdough bread at home",
           "preparing for a job interview as a data engineer", "starting to run three times a week",
           "choosing between renting and buying a flat", "keeping houseplants alive in a dark room",
           "explaining black holes to a ten-year-old", "writing a polite complaint to a landlord",
           "the causes of the First World War", "how vaccines train the immune system",
           "picking a first programming language", "saving energy at home in winter",
           "organising a small wedding", "learning Spanish in six months", "the history of the printing press",
           "making a weekly meal plan for a family of four", "dealing with a difficult coworker",
           "how solar panels turn light into electricity", "training a puppy to walk on a leash",
           "the difference between weather and climate")
_ASKS = ("Can you help me with {t}?", "I'd like some advice on {t}.", "What should I know about {t}?",
         "Give me a step-by-step plan for {t}.", "Explain {t} briefly.", "What are common mistakes in {t}?")
_SYSTEMS = ("You are a helpful assistant.", "You are a concise assistant. Answer in at most five sentences.",
            "You are a friendly expert who explains things simply.", "You are a careful assistant who asks "
            "clarifying questions when a request is ambiguous.")
_ORGS = ("Northwind Analytics", "Bluefin Robotics", "Harbor City Council", "the Alder Valley Water Board",
         "Quillstone Publishing", "Meridian Health Trust", "Copperleaf Foods", "the Tallis Institute")
_SUBJECTS = ("quarterly revenue", "a new recycling programme", "a clinical study of sleep and memory",
             "a data-centre outage", "a merger with a regional rival", "a pilot of a four-day working week",
             "the opening of a new rail line", "a survey of remote workers", "a drought in the upper valley",
             "a software migration to the cloud")
_SENTENCES = (
    "{org} reported that {subject} went {adv} than planned during the {period}.",
    "According to a spokesperson, the main driver was {driver}.",
    "Costs rose by {pct} percent, while the number of {unit} grew to {num}.",
    "Critics argued that {driver} had been underestimated from the start.",
    "A follow-up review is scheduled for {month}, when the board will decide on next steps.",
    "Staff interviewed for the report described the change as {adj}.",
    "The figures for the {period} show {num} {unit}, up from {num2} a year earlier.",
    "Independent analysts noted that similar efforts elsewhere took {num3} months to pay off.",
    "{org} said it would publish the full data set in {month}.",
    "Several questions remain open, in particular how {driver} will evolve.",
)
_ADVS = ("better", "worse", "faster", "slower", "more smoothly")
_DRIVERS = ("higher energy prices", "a shortage of skilled staff", "strong demand in the spring",
            "new regulation", "a delayed supplier contract", "unusually warm weather", "changes in pricing")
_UNITS = ("customers", "participants", "incidents", "subscribers", "households", "trips")
_PERIODS = ("first quarter", "second quarter", "summer", "past year", "last six months")
_MONTHS = ("January", "March", "May", "July", "September", "November")
_ADJS = ("overdue", "stressful", "promising", "confusing", "a relief", "well organised")
_PEOPLE = ("Ana", "Ben", "Chen", "Dara", "Emil", "Farah", "Goran", "Hana")
_SERVICES = ("api-gateway", "auth", "billing", "scheduler", "search", "storage")
_LEVELS = ("INFO", "INFO", "INFO", "WARN", "ERROR")
_EVENTS = ("request served in {ms} ms", "cache miss for key user:{n}", "retrying upstream call (attempt {k})",
           "connection pool at {pct}% capacity", "job {n} finished", "slow query took {ms} ms",
           "health check passed", "rate limit reached for client {n}")


def _code(rng: random.Random) -> dict[str, Any]:
    lang = rng.choice(_LANGS)
    if lang == "SQL":
        return {"prompt": f"Write a SQL query that {rng.choice(_SQL_TASKS)}. Assume tables customers(id, name), "
                          "orders(id, customer_id, created_at, total) and order_items(order_id, product_id, qty). "
                          "Explain each clause."}
    task = rng.choice(_TASKS)
    kind = rng.randint(0, 3)
    if kind == 0:
        return {"prompt": f"{rng.choice(_VERBS)} a {lang} function that {task}. Include comments and two tests."}
    name, a, b = rng.choice(_NAMES), rng.randint(2, 9), rng.randint(10, 99)
    snippet = (f"def {name}(xs):\n    total = 0\n    for i in range(1, len(xs)):\n        if xs[i] % {a} == 0:\n"
               f"            total += xs[i] * {b}\n    return total / len(xs)\n")
    if kind == 1:
        return {"prompt": f"This Python function should sum every element divisible by {a}, times {b}, and "
                          f"average over the list. Find the bugs and fix them:\n\n```python\n{snippet}```"}
    if kind == 2:
        return {"prompt": f"Translate this Python function to idiomatic {lang if lang != 'Python' else 'Rust'} "
                          f"and explain the differences:\n\n```python\n{snippet}```"}
    return {"prompt": f"Explain, line by line, what this code does and what it returns for [{a}, {b}, {a * b}]:"
                      f"\n\n```python\n{snippet}```"}


def _math(rng: random.Random) -> dict[str, Any]:
    a, b, c = rng.randint(2, 40), rng.randint(2, 40), rng.randint(50, 500)
    kind = rng.randint(0, 5)
    if kind == 0:
        return {"prompt": f"A train leaves at 08:{a:02d} and travels {c} km at {b + 40} km/h, then stops for {a} "
                          "minutes and covers another 60 km at 90 km/h. When does it arrive? Show your work."}
    if kind == 1:
        return {"prompt": f"Solve for x: {a}x + {b} = {c}. Then check the answer by substitution."}
    if kind == 2:
        return {"prompt": f"Find the sum of the first {a + 10} terms of the arithmetic series {b}, {b + a}, "
                          f"{b + 2 * a}, ... and explain the formula you use."}
    if kind == 3:
        return {"prompt": f"A bag holds {a} red and {b} blue marbles. Two are drawn without replacement. What "
                          "is the probability that both are the same colour? Give an exact fraction."}
    if kind == 4:
        n = rng.choice(("the sum of the first n odd numbers is n^2", "the square root of 2 is irrational",
                        "there are infinitely many primes", "n^3 - n is divisible by 6 for every integer n",
                        "the sum of the angles of a triangle is 180 degrees"))
        return {"prompt": f"Prove that {n}. Write the proof step by step."}
    return {"prompt": f"Differentiate f(x) = {a}x^3 - {b}x^2 + {c % 17}x - 5, find its stationary points and "
                      "say which is a maximum."}


def _chat(rng: random.Random) -> dict[str, Any]:
    topic = rng.choice(_TOPICS)
    messages = [{"role": "system", "content": rng.choice(_SYSTEMS)}]
    if rng.random() < 0.4:
        other = rng.choice(_TOPICS)
        messages += [{"role": "user", "content": rng.choice(_ASKS).format(t=other)},
                     {"role": "assistant", "content": f"Sure. For {other}, start small, set a clear goal, and "
                                                      "review your progress each week. Want more detail?"}]
    messages.append({"role": "user", "content": rng.choice(_ASKS).format(t=topic)})
    return {"messages": messages}


def _sentence(rng: random.Random, org: str, subject: str) -> str:
    text = rng.choice(_SENTENCES).format(
        org=org, subject=subject, adv=rng.choice(_ADVS), period=rng.choice(_PERIODS), driver=rng.choice(_DRIVERS),
        pct=rng.randint(2, 40), unit=rng.choice(_UNITS), num=rng.randint(1000, 90000),
        num2=rng.randint(1000, 90000), month=rng.choice(_MONTHS), adj=rng.choice(_ADJS), num3=rng.randint(6, 36))
    return text[0].upper() + text[1:]


def _document(rng: random.Random, words: int) -> str:
    org, subject = rng.choice(_ORGS), rng.choice(_SUBJECTS)
    out: list[str] = []
    while sum(len(s.split()) for s in out) < words:
        out.append(_sentence(rng, org, subject))
    return " ".join(out)


def _summarisation(rng: random.Random) -> dict[str, Any]:
    how = rng.choice(("in three bullet points", "in one sentence", "for a busy executive in under 60 words",
                      "as a headline and a two-sentence lede"))
    return {"prompt": f"Summarise the following {how}.\n\n{_document(rng, rng.randint(100, 250))}"}


def _transcript(rng: random.Random, words: int) -> tuple[str, str]:
    lines: list[str] = []
    people = rng.sample(_PEOPLE, 4)
    while sum(len(x.split()) for x in lines) < words:
        who = rng.choice(people)
        lines.append(f"{who}: {_sentence(rng, rng.choice(_ORGS), rng.choice(_SUBJECTS))}")
    return "Meeting transcript\n\n" + "\n".join(lines), f"What did {people[0]} say, and who disagreed with them?"


def _log(rng: random.Random, words: int) -> tuple[str, str]:
    lines: list[str] = []
    t = rng.randint(0, 3600)
    while sum(len(x.split()) for x in lines) < words:
        t += rng.randint(1, 40)
        event = rng.choice(_EVENTS).format(ms=rng.randint(3, 4000), n=rng.randint(1, 999), k=rng.randint(1, 5),
                                           pct=rng.randint(10, 100))
        lines.append(f"2026-11-30T{t // 3600 % 24:02d}:{t // 60 % 60:02d}:{t % 60:02d}Z {rng.choice(_LEVELS)} "
                     f"{rng.choice(_SERVICES)} {event}")
    return "Service log\n\n" + "\n".join(lines), "Which service logged the most errors, and what happened just " \
                                                 "before the first one?"


def _report(rng: random.Random, words: int) -> tuple[str, str]:
    sections = []
    per = words // 4
    for title in ("Background", "Findings", "Risks", "Recommendations"):
        sections.append(f"## {title}\n\n{_document(rng, per)}")
    return "# Internal report\n\n" + "\n\n".join(sections), "List every figure the report gives, with its section."


def _long_context(rng: random.Random) -> dict[str, Any]:
    make: Callable[[random.Random, int], tuple[str, str]] = rng.choice((_transcript, _log, _report))
    doc, question = make(rng, rng.randint(500, 1000))
    return {"prompt": f"{doc}\n\nQuestion: {question}"}


MAKERS: dict[str, Callable[[random.Random], dict[str, Any]]] = {
    "code": _code, "math": _math, "chat": _chat, "summarisation": _summarisation, "long-context": _long_context,
}


def generate(seed: int = SEED) -> list[dict[str, Any]]:
    """The prompt set: ``COUNTS`` distinct entries per category, each with its ``category``, in a seeded order."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for cat, n in COUNTS.items():
        made = 0
        while made < n:
            entry = {**MAKERS[cat](rng), "category": cat}
            key = json.dumps(entry, sort_keys=True)
            if key not in seen:
                seen.add(key)
                out.append(entry)
                made += 1
    rng.shuffle(out)
    return out


def render(entries: list[dict[str, Any]]) -> str:
    """JSONL text: one sorted, compact object a line."""
    return "".join(json.dumps(e, sort_keys=True, ensure_ascii=False) + "\n" for e in entries)


def main(argv: list[str] | None = None) -> int:
    """Write the prompt set to the path given (default: the package's ``data/prompts.jsonl``)."""
    args = sys.argv[1:] if argv is None else argv
    target = Path(args[0]) if args else Path(__file__).resolve().parents[1] / "data" / "prompts.jsonl"
    target.write_text(render(generate()), encoding="utf-8")
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
