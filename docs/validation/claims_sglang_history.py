"""Claims about real SGLang's own history at Llama-3.1-8B's sizes on one H200 (issue 37): ``specwatch bisect`` over
a history on SGLang 0.5.16's Python sources (docs/validation/sglang_history.py), and ``specwatch ab`` of SGLang 0.5.16
against 0.5.17.

Registered into claims.CLAIMS when claims.py imports this module. The runs (2026-12-04, one lent H200): the bisection
in two device calls (2026-12-04-sglang-8b-bisect-x1 at the default tolerance, stopped by the call's limit; then
2026-12-04-sglang-8b-bisect-x1-2 at 10%, its first call's rounds carried over in the memo), and
2026-12-04-sglang-8b-versions-x1 on the warm machine of the second.
"""

from __future__ import annotations

import re
import statistics

import outputs as parse
import sglang_history  # the history's commits: which one slows, which cannot boot
from claims import HOLDS, MEASURED, NOT_MET, Finding, claim, table
from outputs import pct

BISECT1, BISECT2 = "2026-12-04-sglang-8b-bisect-x1", "2026-12-04-sglang-8b-bisect-x1-2"
VERSIONS8B = "2026-12-04-sglang-8b-versions-x1"
SGL_STORE = parse.DATA.parent / "sglang" / "baselines"
DECODE = "sgl8b-eagle3/single-stream/decode_tok_s"
#: a bisection progress line: ``[bisect] <sha> '<subject>'  VERDICT  <numbers>  (<s> s)``
STEP = re.compile(r"""^\[bisect\] ([0-9a-f]{10}) (['"])(.*?)\2\s+(GOOD|BAD|SKIP)\s+(.*?)\s+\(([\d.]+) s\)$""")


def _steps(text: str) -> list[tuple[str, str, str, str]]:
    """(short sha, subject, verdict, what the line says) of each step line, in order."""
    return [(m[1], m[3], m[4], m[5]) for line in text.splitlines() if (m := STEP.match(line))]


def _median(memo: str, ident: str, key: str = DECODE) -> float | None:
    """The median of ``key`` in one round's measurement in a committed memo (None: not measured)."""
    from specwatch.store.result import ResultSet

    path = parse.DATA / memo / f"{ident}.results.json"
    if not path.is_file():
        return None
    found = [r for r in ResultSet.load(path).results if r.key == key]
    return statistics.median(found[0].samples) if found and found[0].samples else None


def _edit_of(subject: str) -> sglang_history.Edit | None:
    """The history's edit whose message the (possibly shortened) subject starts."""
    stem = subject.removesuffix("...")
    return next((e for e in sglang_history.HISTORY if e.message.startswith(stem)), None)


@claim("sglang-8b-bisect", "`specwatch bisect` over a history on real SGLang's own sources names the commit that "
       "runs one-request verify batches eagerly (H200, Llama-3.1-8B's sizes)",
       "the slowing commit named first bad, the commit that cannot boot skipped (never blamed), no healthy commit "
       "bad; each step's numbers are its memo's measurements", "37",
       again=("sglang-8b-bisect-x1",))
def sglang_8b_bisect() -> Finding:
    """The second call's report against the history it bisected (sglang_history.HISTORY: which edit slows, which
    cannot boot) and each step's ratio against the round files of its memo."""
    rel = f"{BISECT2}/sgl8b-bisect.txt"
    text = parse.read(rel)
    first = re.search(r"^\[bisect\] first bad: ([0-9a-f]{10}) '(.*)'$", text, re.M)
    slowing = next(e for e in sglang_history.HISTORY if e.slows)
    broken = next(e for e in sglang_history.HISTORY if not e.boots)
    ok = first is not None and first[2] == slowing.message
    memo = f"{BISECT2}/memo"
    full = {p.name.split("-", 1)[0] for p in (parse.DATA / memo).glob("*-step-r1.*.json")
            if not p.name.endswith(".results.json")}
    rows, slow = [], []
    for short, subject, verdict, said in _steps(text):
        edit = _edit_of(subject)
        sha = next((s for s in full if s.startswith(short)), short)
        good, step = _median(memo, f"{sha}-good-r1"), _median(memo, f"{sha}-step-r1")
        ratio = f"{step:.1f} / {good:.1f} = {step / good:.3f}" if good and step else "-"
        if edit is None:
            ok = False
        elif not edit.boots:
            ok &= verdict == "SKIP"
        else:
            ok &= verdict == ("BAD" if edit.slows else "GOOD")
        if good and step and (m := re.search(r"\(([-+][\d.]+)%\)", said)):
            ok &= abs((step / good - 1) * 100 - float(m[1])) < 0.05
        rows.append([f"`{short}`", subject, verdict, ratio, said])
        if verdict == "BAD" and good and step:
            slow.append((sha, step, step / good - 1))
    skipped = re.search(rf"^\[bisect\] skipped \(not blamed\): [0-9a-f]{{10}} '{re.escape(broken.message)}'", text,
                        re.M)
    ok &= skipped is not None
    first_text = parse.read(f"{BISECT1}/sgl8b-bisect.txt")
    open_line = next((ln for ln in first_text.splitlines() if "still open after 1 rounds" in ln), "")
    tol1 = re.search(r"tolerance ([\d.]+%) \(the smallest", first_text)
    detail = table(["commit", "subject", "verdict", "decode tok/s, step / good (memo)", "the report's line"], rows)
    culprit = next((sha for sha, _, _ in slow if first and sha.startswith(first[1])), "")
    cycle = [_median(memo, f"{culprit}-{side}-r1", DECODE.replace("decode_tok_s", k))
             for side in ("step", "good") for k in ("cycle_ms", "accept_length")]
    cycles = (f"The slowing commit's cycle is {cycle[0]:.1f} ms against the good side's {cycle[2]:.1f} ms at an "
              f"accept length of {cycle[1]:.2f} against {cycle[3]:.2f} (its memo's results files): the verify step "
              "lost its CUDA graph, the case study's cause." if None not in cycle else "")
    bad_end = slow[0] if slow else None
    detail += (f"\n\nThe history (docs/validation/sglang_history.py) lays SGLang 0.5.16's `python/sglang` from the kit "
               f"in a git repository with {len(sglang_history.HISTORY) - 1} commits on top; the bisection ran "
               f"`specwatch bisect --good HEAD~{len(sglang_history.HISTORY) - 1} --bad HEAD` with the 8B-shape EAGLE-3 "
               f"profile that each checkout's sources run. Each step is an A/B against the good commit in alternating "
               f"rounds, a fresh boot of each side a round. {cycles} The first call "
               f"({BISECT1}) bisected at the default tolerance, {tol1[1] if tol1 else '?'} at this shape's round "
               f"spread: it judged the bad end and skipped the broken commit, then a healthy commit "
               f"({open_line.split()[1] if open_line else '?'}) stayed open after one round (about 3 rounds settle one "
               f"at that tolerance) and the call's limit stopped it. The second call bisected at --tolerance 0.1 "
               f"(the bad end measured {pct(bad_end[2]) if bad_end else '?'}), judging the first call's rounds again "
               f"from the memo (no boot), which is why those steps show 0.1 s. The slow measurements differ "
               f"({' and '.join(f'{v:.1f}' for _, v, _ in slow)} tok/s, the first on the first call's machine): "
               f"without its graph the verify step is bound by the host's kernel launches. History: "
               f"[changelog section 18](changelog.md#section-18).")
    measured = (f"first bad: '{first[2]}'" if first else "no first bad named") + \
        f"; '{broken.message}' skipped; {len(rows)} steps, {sum(r[2] == 'GOOD' for r in rows)} good"
    return Finding(HOLDS if ok else NOT_MET, measured, [rel, f"{BISECT1}/sgl8b-bisect.txt",
                                                        f"{BISECT2}/memo/bisect-run.log"], detail)


@claim("sglang-8b-versions", "`specwatch ab` of SGLang 0.5.16 against 0.5.17: EAGLE-3 at Llama-3.1-8B's sizes (H200)",
       "a verdict with its interval; the same rounds judged again by today's rule agree", "37",
       again=("sglang-8b-versions-x1",))
def sglang_8b_versions() -> Finding:
    """The device's verdict per key, and the rounds judged again: prior from the validation store's round history of
    the same key and served identity, the looks as ab runs them."""
    from specwatch.revisions import rounds as ab_rounds
    from specwatch.revisions.plan import plan_key
    from specwatch.store.roundspread import RoundSpread

    rel = f"{VERSIONS8B}/sgl8b-ab-versions.txt"
    text = parse.read(rel)
    run = parse.ab_run(text)
    store = RoundSpread.for_class(SGL_STORE, "h200x1")
    design = ab_rounds.RoundSettings.make(2, 2, None).design
    rows, ok, said = [], run.verdict is not None, {}
    for key in sorted({k for r in parse.ab_rounds(text) for k in r.values}, key=lambda k: "output" in k):
        ratios = parse.ab_ratios(text, key)
        plan = plan_key(key, store, design, None, "sglang", rounds=ratios[:design.first])
        summary, now, _, _ = ab_rounds.judge_key(ratios, True, plan, design)
        line = run.keys.get(key, "")
        interval = re.search(r"head/base ([\d.]+) \[([\d.]+), ([\d.]+)\]", line)
        device = run.key_verdict(key) or "none"
        ok &= device.replace(" ", "_") == now
        said[key] = (device, interval)
        rows.append([key.rsplit("/", 1)[-1], " ".join(pct(r - 1) for r in ratios),
                     f"{device}: {interval[1]} [{interval[2]}, {interval[3]}]" if interval else device,
                     f"{now.replace('_', ' ')} at ±{plan.tolerance:.1%}: {summary.ratio:.3f} "
                     f"[{summary.low:.3f}, {summary.high:.3f}]"])
    base, head = run.medians["base"], run.medians["head"]
    detail = table(["metric", "per round (0.5.17/0.5.16)", "the device said (ratio, interval)", "judged again now"],
                   rows)
    detail += (f"\n\nEach side booted twice, alternating (decode tok/s: 0.5.16 {', '.join(f'{v:.1f}' for v in base)}; "
               f"0.5.17 {', '.join(f'{v:.1f}' for v in head)}). The 0.5.17 site is the 0.5.16 kit with the 0.5.17 "
               "overlay (sglang 0.5.17, flashinfer 0.6.15.post1), the same models, flags and torch 2.11, so the two "
               "sides differ in the engine's release alone. Its keys' prior is the 8B shape's round history "
               "(docs/validation/sglang/baselines/h200x1/round-spread.json); on the tiny launch-bound model the same "
               "question was never answered: two calls were cut by their limit while its rounds swung tens of "
               "percent ([changelog section 16](changelog.md#section-16)). "
               "History: [changelog section 18](changelog.md#section-18).")
    dev, interval = said.get(DECODE, ("none", None))
    measured = (f"{dev}: decode tok/s {pct(float(interval[1]) - 1)} "
                f"[{pct(float(interval[2]) - 1)}, {pct(float(interval[3]) - 1)}] after 2 rounds"
                if interval else f"{dev} (no interval printed)")
    return Finding(MEASURED if ok else NOT_MET, measured, [rel, f"{VERSIONS8B}/commands.txt"], detail,
                   replayed=True)
