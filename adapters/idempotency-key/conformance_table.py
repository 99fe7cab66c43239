"""Writes docs/conformance/idempotency-key.md from the certify-all.sh output: one reqkey-results/1 per library x storage.

    conformance_table.py --results OUT_DIR --out FILE.md

OUT_DIR holds one directory per wrapper x storage, as certify-all.sh leaves
them: wrapper.json ({wrapper, storage}), replay-args.txt (run.sh arguments for a replay), health.json (what
the wrapper declared), exit-code, certify.log, seconds, and results.json
when `reqkey certify` wrote one (see docs/reports.md for its fields: per
scenario `verdict`, `checks` = the clause ids, `clauses` = each clause's
standing (`pass`, `fail`, `not_judged` with why), `failure` with the
`clauses` its failed check judges; the run's `seed`; `fuzz`, the
certification's fuzz pass: its bursts, programs and verdict).

A clause is charged only on the evidence of a check that judges it (issue
45): FAIL where a failed check names it, pass where a check of it passed
and none failed, not judged otherwise. With `--previous FILE` (the table
this one replaces) the page says which FAILs went and which came. A
failing fuzz pass makes the row DOES NOT CONFORM and its clause (the
`[idem...]` its reason names) FAIL, whatever the scenarios said.

Everything a target or a library wrote (messages, names, versions, the
profile) is data: it is escaped for Markdown and HTML before it reaches the
page, and long text is cut. Exit 2 when OUT_DIR has no wrapper directory or
the page cannot be written.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import sys
from typing import Any, Optional

PROFILE_FIELDS = [
    "keyRequired", "keySyntax", "invalidKeyStatus", "fingerprint", "mismatchStatus", "concurrent",
    "concurrentStatus", "errors", "scope", "expiryMs", "lockMs", "replayHeader", "durable",
]
MAX_CELL_CHARS = 300
# The clause a fuzz failure names: its reason says `[idem.x.y] ...`.
FUZZ_CLAUSE = re.compile(r"\[(idem\.[a-z0-9.-]+)\]")
# How a scenario verdict counts for each clause it checks; the worst wins.
# Per-clause standings: FAIL outranks pass, pass (a check of it passed)
# outranks not judged. Older results (scenario verdicts only): the worst wins.
CLAUSE_RANK = {"not judged": 0, "pass": 1, "FAIL": 2}
SCENARIO_RANK = {"pass": 0, "not judged": 1, "FAIL": 2}
# A clause standing of results.json as the table shows it.
CLAUSE_STANDING = {"pass": "pass", "fail": "FAIL", "not_judged": "not judged"}
SCENARIO_TO_CLAUSE = {
    "pass": "pass", "expected_fail": "pass",
    "fail": "FAIL", "unexpected_pass": "FAIL",
    "error": "not judged", "indefinite": "not judged",
}


def md(value: Any, limit: int = MAX_CELL_CHARS) -> str:
    """Target text as inert Markdown table-cell text: no markup, no new cells, no line breaks."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    if len(text) > limit:
        text = text[:limit] + "…"
    for a, b in (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ("|", "&#124;"), ("`", "&#96;"),
                 ("*", "&#42;"), ("_", "&#95;"), ("[", "&#91;"), ("]", "&#93;"), ("\\", "&#92;")):
        text = text.replace(a, b)
    return " ".join(text.split())


def code(text: str) -> str:
    """A command in a code span (our own text: the start command, seed and file)."""
    fence = "``" if "`" in text else "`"
    return f"{fence}{text.replace('|', '&#124;')}{fence}"


def read_json(path: str) -> Optional[Any]:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def read_text(path: str, default: str = "") -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return default


class Target:
    """One wrapper x storage as certify-all.sh left it."""

    def __init__(self, directory: str) -> None:
        self.dir = directory
        w = read_json(os.path.join(directory, "wrapper.json")) or {}
        self.wrapper = str(w.get("wrapper", os.path.basename(directory)))
        self.storage = str(w.get("storage", "?"))
        self.replay_args = read_text(os.path.join(directory, "replay-args.txt")).strip()
        self.results = read_json(os.path.join(directory, "results.json"))
        if not isinstance(self.results, dict) or self.results.get("schema") != "reqkey-results/1":
            self.results = None
        exit_text = read_text(os.path.join(directory, "exit-code")).strip()
        self.exit_code = int(exit_text) if exit_text.isdigit() else None
        self.seconds = read_text(os.path.join(directory, "seconds")).strip()
        # What it declared: the /health certify read, else the one saved before.
        health = None
        if self.results:
            health = (self.results.get("target") or {}).get("health")
        if not isinstance(health, dict) or "profile" not in health:
            health = read_json(os.path.join(directory, "health.json"))
        self.health = health if isinstance(health, dict) else {}
        impl = self.health.get("implementation")
        self.impl = impl if isinstance(impl, dict) else {}
        profile = self.health.get("profile")
        self.profile = profile if isinstance(profile, dict) else None

    @property
    def name(self) -> str:
        return str(self.impl.get("name") or self.wrapper)

    @property
    def label(self) -> str:
        return f"{self.name} / {self.storage}"

    def scenarios(self) -> list[dict]:
        s = (self.results or {}).get("scenarios")
        return [x for x in s if isinstance(x, dict)] if isinstance(s, list) else []

    def fuzz(self) -> dict:
        f = (self.results or {}).get("fuzz")
        return f if isinstance(f, dict) else {}

    def fuzz_clause(self) -> Optional[str]:
        """The clause a failing fuzz pass names, if it failed."""
        if self.fuzz().get("verdict") != "failed":
            return None
        m = FUZZ_CLAUSE.search(str(self.fuzz().get("reason") or ""))
        return m.group(1) if m else "idem.effect.at-most-once"

    def fuzz_violations(self) -> list[dict]:
        """Every distinct violation the fuzz pass proved (`fuzz.violations`,
        one per clause set blamed by counterfactual), each saying whether its
        reproduction was replayed red against the target. An older
        results.json has none: its one failure is read from `reason`."""
        if self.fuzz().get("verdict") != "failed":
            return []
        v = self.fuzz().get("violations")
        listed = [x for x in v if isinstance(x, dict) and x.get("clause")] if isinstance(v, list) else []
        if listed:
            return listed
        clause = self.fuzz_clause()
        return [{"clause": clause, "clauses": [clause], "message": self.fuzz().get("reason") or ""}] if clause else []

    def verdict(self) -> str:
        if self.results is None:
            return "NOT JUDGED"
        code_ = self.results.get("exit_code")
        fuzz = self.fuzz().get("verdict")
        # The fuzz pass bears on the verdict even where an older results.json
        # left it out of `exit_code`: a failing program is a proven violation.
        if code_ in (0, 2) and fuzz == "failed":
            return "DOES NOT CONFORM"
        if code_ == 0 and fuzz == "error":
            return "NOT JUDGED"
        return {0: "CONFORMS", 1: "DOES NOT CONFORM"}.get(code_, "NOT JUDGED")

    def not_judged_reason(self) -> str:
        if self.results and isinstance(self.results.get("indefinite"), dict):
            ind = self.results["indefinite"]
            return f"{ind.get('reason')}: {ind.get('message')}"
        if self.results is None:
            lines = [ln for ln in read_text(os.path.join(self.dir, "certify.log")).splitlines() if ln.strip()]
            last = lines[-1] if lines else "no certify.log"
            return f"no results.json (certify exit {self.exit_code}): {last}"
        return ""

    def clause_verdicts(self) -> dict[str, str]:
        """Each clause on the evidence of its checks: FAIL, pass or not judged.

        A results.json with per-clause standings (`clauses`) is read clause
        by clause; an older one (no `clauses`) by its scenario verdicts.
        """
        out: dict[str, str] = {}

        def put(clause: str, v: str, rank: dict[str, int] = CLAUSE_RANK) -> None:
            if clause not in out or rank[v] > rank[out[clause]]:
                out[clause] = v

        for s in self.scenarios():
            standings = s.get("clauses")
            if isinstance(standings, list):
                for c in standings:
                    if isinstance(c, dict) and c.get("clause"):
                        put(str(c["clause"]), CLAUSE_STANDING.get(str(c.get("standing")), "not judged"))
                continue
            v = SCENARIO_TO_CLAUSE.get(str(s.get("verdict")), "not judged")
            for clause in s.get("checks") or []:
                put(str(clause), v, SCENARIO_RANK)
        for v in self.fuzz_violations():
            for clause in v.get("clauses") or [v.get("clause")]:
                out[str(clause)] = "FAIL"
        return out

    def fuzz_replay(self) -> str:
        seed = self.fuzz().get("seed", (self.results or {}).get("seed"))
        args = self.replay_args or f"{self.wrapper} --storage {self.storage}"
        start = f"adapters/idempotency-key/run.sh {args} --effects-file $(mktemp -u) --port {{port}}"
        return f"\"$REQKEY\" certify --start \"{start}\" --target 'idem+http://127.0.0.1:{{port}}' --seed {seed}"

    def failed_clauses(self, scenario: dict) -> list[str]:
        """The clauses a failed scenario's failed checks judge (older results: its checks)."""
        failures = [scenario.get("failure")] + list(scenario.get("later_failures") or [])
        named = [str(c) for f in failures if isinstance(f, dict) for c in (f.get("clauses") or [])]
        if isinstance(scenario.get("clauses"), list):
            return list(dict.fromkeys(named))
        return [str(c) for c in scenario.get("checks") or []]

    def replay(self, scenario: dict) -> str:
        f = str(scenario.get("file", ""))
        if f.startswith("embedded/"):
            f = "scenarios/" + f[len("embedded/"):]
        seed = (self.results or {}).get("seed")
        args = self.replay_args or f"{self.wrapper} --storage {self.storage}"
        # The effects file is named once, by the caller's shell, so that it
        # outlives the restarts of a crash scenario.
        start = f"adapters/idempotency-key/run.sh {args} --effects-file $(mktemp -u) --port {{port}}"
        return f"\"$REQKEY\" run {f} --start \"{start}\" --target 'idem+http://127.0.0.1:{{port}}' --seed {seed}"


def profile_cell(p: Optional[dict], field: str) -> str:
    if p is None or field not in p:
        return "—"
    v = p[field]
    if isinstance(v, list):
        return md("[" + ", ".join(str(x) for x in v) + "]")
    return md(v)


def previous_cells(text: str) -> dict[tuple[str, str], str]:
    """(clause, target label) -> cell of a previous table's "Clause by clause" section."""
    cells: dict[tuple[str, str], str] = {}
    lines = text.splitlines()
    try:
        start = lines.index("## Clause by clause")
    except ValueError:
        return cells
    header: list[str] = []
    for line in lines[start + 1:]:
        if line.startswith("## "):
            break
        if not line.startswith("|") or line.startswith("|---"):
            continue
        row = [c.strip() for c in line.strip().strip("|").split("|")]
        if row[0] == "clause":
            header = row[1:]
            continue
        clause = row[0].strip("`")
        for label, cell in zip(header, row[1:]):
            cells[(clause, label)] = cell
    return cells


def changes(targets: list[Target], previous: dict[tuple[str, str], str]) -> list[str]:
    """Lines: per target, the FAILs that went and the FAILs that came."""
    out: list[str] = []
    for t in targets:
        now = t.clause_verdicts()
        label = md(t.label)
        before = {c for (c, l), cell in previous.items() if l == label and cell == "**FAIL**"}
        after = {c for c, v in now.items() if v == "FAIL"}
        went = sorted(before - after)
        came = sorted(after - before)
        if not went and not came:
            continue
        parts = []
        if went:
            parts.append("FAIL went: " + ", ".join(
                f"`{md(c)}` (now {md(now.get(c, 'not run'))})" for c in went))
        if came:
            parts.append("FAIL came: " + ", ".join(f"`{md(c)}`" for c in came))
        out.append(f"- {label}: " + "; ".join(parts))
    return out


def render(targets: list[Target], now: str, previous: Optional[dict[tuple[str, str], str]] = None) -> str:
    lines: list[str] = []
    add = lines.append
    add("# Idempotency-Key libraries: conformance table")
    add("")
    add("Written by `adapters/idempotency-key/certify-all.sh` (do not edit by hand): each library people install,")
    add("wrapped in a `reqkey-idem/1` app (`adapters/idempotency-key/`), certified by `reqkey certify` over each storage")
    add("its wrapper has. The judge holds each library to the profile it DECLARES (the second table: what its docs and")
    add("configuration say it does); the one requirement of every profile is that a side effect runs at most once per")
    add("key, payload and scope while the key lives. See `adapters/idempotency-key/README.md` for what each declared")
    add("field is based on.")
    add("")
    versions = sorted({str(t.results.get("reqkey_version")) for t in targets if t.results})
    digests = sorted({str((t.results.get("suite") or {}).get("digest")) for t in targets if t.results})
    add(f"- generated: {md(now)}")
    add(f"- reqkey: {', '.join(md(v) for v in versions) or 'none ran'}; suite digest: {', '.join(md(d) for d in digests) or '—'}")
    add("- clause verdicts, each on the evidence of the checks that judge it (a scenario's failed check fails its")
    add("  own clauses, nothing else): **FAIL** (a check of it failed), `pass` (a check of it passed, none failed),")
    add("  `not judged` (no check of it reached a verdict: the scenario stopped before it, or could not be judged),")
    add("  `—` (no scenario judging it ran for that target: not applicable to the declared profile, or nothing ran)")
    add("")
    if previous is not None:
        add("## What changed since the previous table")
        add("")
        add("This table's judge meets the handler's own 4xx (issue 56): a body that is not a JSON object is")
        add("refused by the app's handler on every route (it counts its run, then answers 422 with its order), so")
        add("the fuzz pass sends JSON of every type at the top level and its battery retries a refused body, then")
        add("sends the key an object: under `errors: stored` the refusal is replayed, under `released` every retry")
        add("runs (scenarios `idem.handler-4xx-stored` and `idem.handler-4xx-released`). Every JSON body now goes")
        add("out with `Content-Type: application/json`, as a client sends it: before, the scenarios' bodies named")
        add("no media type and NestJS parsed none, so @node-idempotency/nestjs saw `{}` for every scenario body (its")
        add("`idem.fingerprint.mismatch` and `idem.effects.recorded` FAILs were that, and went; its fingerprint,")
        add("`JSON.stringify` of the parsed body, now shows that it tells reordered members apart). Two waivers are")
        add("offered only where they could be the cause: a replayed handler 422 is never a malformed key, and a")
        add("refusal beside a run of its own scoped key is never a scope fault. A finding whose reproduction passed")
        add("every replay says so (not reproduced: timing or load); such FAILs may come and go between tables.")
        add("Per target, the FAILs that went and came:")
        add("")
        lines_ = changes(targets, previous)
        lines.extend(lines_ or ["- no FAIL went or came."])
        add("")
    add("## Verdicts")
    add("")
    powers = sorted({str(t.fuzz().get("power")) for t in targets if t.fuzz().get("power")})
    if powers:
        add(f"- fuzz pass: before its programs, every certification sent {'; '.join(md(p) for p in powers)}, whatever the")
        add("  declared profile; a failing program fails the certification and the clause it names")
    add("")
    add("| library | version | storage | verdict | passed | failed | not judged | not applicable | fuzz pass | seed | time (s) |")
    add("|---|---|---|---|---|---|---|---|---|---|---|")
    for t in targets:
        c = (t.results or {}).get("counts") or {}
        na = len((t.results or {}).get("not_applicable") or [])
        verdict = t.verdict()
        if verdict == "NOT JUDGED":
            verdict = f"NOT JUDGED: {md(t.not_judged_reason(), 200)}"
        elif verdict == "DOES NOT CONFORM":
            verdict = "**DOES NOT CONFORM**"
        nj = (c.get("errored", 0) or 0) + (c.get("indefinite", 0) or 0) if t.results else "—"
        fv = str(t.fuzz().get("verdict") or "—")
        fuzz_cell = f"**{md(fv)}**" if fv in ("failed", "error") else md(fv)
        add(f"| {md(t.name)} | {md(t.impl.get('version', '?'))} | {md(t.storage)} | {verdict} | "
            f"{c.get('passed', '—')} | {c.get('failed', '—')} | {nj} | {na if t.results else '—'} | "
            f"{fuzz_cell} | {md((t.results or {}).get('seed', '—'))} | {md(t.seconds or '—')} |")
    add("")
    add("## Declared profiles")
    add("")
    add("| library | storage | " + " | ".join(PROFILE_FIELDS) + " |")
    add("|---|---|" + "---|" * len(PROFILE_FIELDS))
    for t in targets:
        add(f"| {md(t.name)} | {md(t.storage)} | " + " | ".join(profile_cell(t.profile, f) for f in PROFILE_FIELDS) + " |")
    add("")
    add("## Clause by clause")
    add("")
    per_target = [t.clause_verdicts() for t in targets]
    clauses = sorted({c for v in per_target for c in v})
    if not clauses:
        add("No scenario ran against any target: nothing to show clause by clause.")
    else:
        add("| clause | " + " | ".join(md(t.label) for t in targets) + " |")
        add("|---|" + "---|" * len(targets))
        for clause in clauses:
            cells = []
            for v in per_target:
                x = v.get(clause)
                cells.append("**FAIL**" if x == "FAIL" else (f"`{x}`" if x else "—"))
            add(f"| `{md(clause)}` | " + " | ".join(cells) + " |")
    add("")
    add("## Violations")
    add("")
    any_violation = False
    for t in targets:
        failed = [s for s in t.scenarios() if s.get("verdict") in ("fail", "unexpected_pass")]
        violations = t.fuzz_violations()
        if not failed and not violations:
            continue
        any_violation = True
        add(f"### {md(t.label)} {md(t.impl.get('version', ''))}")
        add("")
        for s in failed:
            f = s.get("failure") if isinstance(s.get("failure"), dict) else {}
            clauses_ = ", ".join(f"`{md(c)}`" for c in t.failed_clauses(s)) or "—"
            add(f"- **{md(s.get('id'))}** ({clauses_}): {md(f.get('message', s.get('verdict')))}")
            add(f"  - trial {md(f.get('trial', '—'))}, step {md(f.get('step', '—'))}; seed {md((t.results or {}).get('seed'))}")
            if f.get("expected") is not None:
                add(f"  - expected: {md(f.get('expected'))}")
            if f.get("actual") is not None:
                add(f"  - actual: {md(f.get('actual'))}")
            add(f"  - replay: {code(t.replay(s))}")
        for v in violations:
            clauses_ = ", ".join(f"`{md(c)}`" for c in (v.get("clauses") or [v.get("clause")]))
            add(f"- **fuzz pass** ({clauses_}): {md(str(v.get('message') or ''), 600)}")
            if "reproduced" not in v:
                note = "an earlier reqkey's result: its reproduction was not replayed"
            elif v.get("reproduced"):
                note = "its reproduction was replayed against this library before it was written and failed again on this clause"
            else:
                note = "its reproduction did NOT fail again when replayed: " + md(str(v.get("notReproduced") or "no reason given"), 300)
            add(f"  - {note}")
            add(f"  - seed {md(t.fuzz().get('seed', '—'))}; the reproduction is the matching entry of `fuzz.violations` (`scenarioYaml`) in its results.json")
        if violations:
            add(f"  - replay: {code(t.fuzz_replay())}")
        add("")
    if not any_violation:
        add("No scenario failed.")
        add("")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(prog="conformance_table.py")
    ap.add_argument("--results", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--date", default=None, help="the generation date to print (default: now, UTC)")
    ap.add_argument("--previous", default=None, help="the table this one replaces: say which FAILs went and came")
    a = ap.parse_args()
    try:
        dirs = sorted(d for d in os.listdir(a.results) if os.path.isfile(os.path.join(a.results, d, "wrapper.json")))
    except OSError as e:
        print(f"conformance_table.py: cannot read {a.results}: {e}", file=sys.stderr)
        return 2
    if not dirs:
        print(f"conformance_table.py: no wrapper directory (with wrapper.json) in {a.results}", file=sys.stderr)
        return 2
    targets = [Target(os.path.join(a.results, d)) for d in dirs]
    now = a.date or dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    previous = None
    if a.previous:
        prev_text = read_text(a.previous, default="")
        previous = previous_cells(prev_text) if prev_text else None
    page = render(targets, now, previous)
    try:
        with open(a.out, "w", encoding="utf-8") as f:
            f.write(page + "\n")
    except OSError as e:
        print(f"conformance_table.py: cannot write {a.out}: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
