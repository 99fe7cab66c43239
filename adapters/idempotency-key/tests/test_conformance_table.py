"""Unit tests of conformance_table.py on hand-made reqkey-results/1 documents (verdict ranking, not judged, escaping)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
import conformance_table as ct  # noqa: E402

PROFILE = {"keyRequired": False, "keySyntax": "any", "invalidKeyStatus": None, "fingerprint": "none",
           "mismatchStatus": None, "concurrent": "conflict", "concurrentStatus": 409, "errors": "stored",
           "scope": [], "expiryMs": 2000, "lockMs": None, "replayHeader": "idempotent-replayed", "durable": False}


def health(name="lib<script>", version="1.0|0"):
    return {"protocol": "reqkey-idem/1", "implementation": {"name": name, "version": version, "storage": "memory"},
            "profile": PROFILE}


def scenario(sid, verdict, checks, message="m"):
    failure = None if verdict == "pass" else {"trial": 3, "step": "steps[2] post", "message": message,
                                              "expected": {"status": 201}, "actual": {"status": 409}, "detail": None,
                                              "reason": None}
    return {"id": sid, "file": f"embedded/idempotency-key/{sid}.yaml", "checks": checks, "verdict": verdict,
            "failure": failure}


def results(scenarios, exit_code, indefinite=None):
    return {"schema": "reqkey-results/1", "reqkey_version": "0.1.0", "target": {"health": health()},
            "suite": {"digest": "sha256:abc"}, "seed": 42, "exit_code": exit_code, "indefinite": indefinite,
            "counts": {"passed": 1, "failed": 1, "errored": 1, "indefinite": 0}, "not_applicable": [],
            "scenarios": scenarios}


def write_target(root, name, storage, res=None, health_doc=None, log="", code=None):
    d = os.path.join(root, f"{name}-{storage}")
    os.makedirs(d)
    with open(os.path.join(d, "wrapper.json"), "w") as f:
        json.dump({"wrapper": name, "storage": storage}, f)
    with open(os.path.join(d, "replay-args.txt"), "w") as f:
        f.write(f"{name} --storage {storage} --expiry-ms 2000")
    if res is not None:
        with open(os.path.join(d, "results.json"), "w") as f:
            json.dump(res, f)
    if health_doc is not None:
        with open(os.path.join(d, "health.json"), "w") as f:
            json.dump(health_doc, f)
    with open(os.path.join(d, "certify.log"), "w") as f:
        f.write(log)
    if code is not None:
        with open(os.path.join(d, "exit-code"), "w") as f:
            f.write(str(code))
    return d


class TableTests(unittest.TestCase):
    def test_worst_verdict_wins_per_clause(self):
        with tempfile.TemporaryDirectory() as root:
            d = write_target(root, "a", "memory", results([
                scenario("s1", "pass", ["idem.x", "idem.y"]),
                scenario("s2", "fail", ["idem.y"]),
                scenario("s3", "error", ["idem.x", "idem.z"]),
            ], 1))
            v = ct.Target(d).clause_verdicts()
            self.assertEqual(v, {"idem.x": "not judged", "idem.y": "FAIL", "idem.z": "not judged"})

    def test_a_clause_is_charged_only_by_a_check_that_judges_it(self):
        # Issue 45: the header check failed at steps[1]; the effect counter
        # was read anyway and at-most-once passed; expiry was never reached.
        failing = scenario("s1", "fail", ["idem.replay.completed", "idem.effect.at-most-once",
                                          "idem.expiry.honoured"])
        failing["failure"]["clauses"] = ["idem.replay.completed"]
        failing["clauses"] = [
            {"clause": "idem.replay.completed", "standing": "fail", "why": "steps[1] post"},
            {"clause": "idem.effect.at-most-once", "standing": "pass"},
            {"clause": "idem.expiry.honoured", "standing": "not_judged", "why": "stopped at steps[1] post"},
        ]
        other = scenario("s2", "pass", ["idem.expiry.honoured"])
        other["clauses"] = [{"clause": "idem.expiry.honoured", "standing": "not_judged", "why": "x"}]
        with tempfile.TemporaryDirectory() as root:
            d = write_target(root, "a", "memory", results([failing, other], 1))
            t = ct.Target(d)
            self.assertEqual(t.clause_verdicts(), {"idem.replay.completed": "FAIL",
                                                   "idem.effect.at-most-once": "pass",
                                                   "idem.expiry.honoured": "not judged"})
            self.assertEqual(t.failed_clauses(failing), ["idem.replay.completed"])
            page = ct.render([t], "2026-01-01T00:00:00Z")
            self.assertIn("- **s1** (`idem.replay.completed`):", page)
            previous = {("idem.effect.at-most-once", ct.md(t.label)): "**FAIL**",
                        ("idem.replay.completed", ct.md(t.label)): "`pass`"}
            page = ct.render([t], "2026-01-01T00:00:00Z", previous)
            self.assertIn("## What changed since the previous table", page)
            self.assertIn("FAIL went: `idem.effect.at-most-once` (now pass); FAIL came: `idem.replay.completed`",
                          page)

    def test_a_previous_table_is_read_back_by_clause_and_target(self):
        text = "## Clause by clause\n\n| clause | a / memory | b / redis |\n|---|---|---|\n" \
               "| `idem.x` | **FAIL** | `pass` |\n\n## Violations\n"
        self.assertEqual(ct.previous_cells(text), {("idem.x", "a / memory"): "**FAIL**",
                                                   ("idem.x", "b / redis"): "`pass`"})

    def test_page_names_violation_seed_and_replay_and_escapes_target_text(self):
        with tempfile.TemporaryDirectory() as root:
            write_target(root, "a", "memory", results([
                scenario("s2", "fail", ["idem.y"], message="<img src=x> | `rm` *bold* [link](http://x)"),
            ], 1))
            page = ct.render([ct.Target(os.path.join(root, "a-memory"))], "now")
            self.assertIn("**DOES NOT CONFORM**", page)
            self.assertIn("| `idem.y` | **FAIL** |", page)
            self.assertIn("seed 42", page)
            self.assertIn("run scenarios/idempotency-key/s2.yaml", page)
            self.assertIn("--seed 42", page)
            self.assertIn("adapters/idempotency-key/run.sh a --storage memory --expiry-ms 2000", page)
            for raw in ("<img", "<script>", "| `rm`", "*bold*", "[link]", "1.0|0"):
                self.assertNotIn(raw, page)
            self.assertIn("&lt;img src=x&gt; &#124; &#96;rm&#96;", page)
            self.assertIn("lib&lt;script&gt;", page)

    def test_no_results_is_not_judged_with_the_log_line_and_profile_from_health_json(self):
        with tempfile.TemporaryDirectory() as root:
            write_target(root, "b", "redis", None, health(name="b"), log="x\nreqkey: error: unsupported target\n", code=2)
            page = ct.render([ct.Target(os.path.join(root, "b-redis"))], "now")
            self.assertIn("NOT JUDGED: no results.json (certify exit 2): reqkey: error: unsupported target", page)
            self.assertIn("| b | redis | false | any | null | none | null | conflict | 409 | stored |", page)
            self.assertIn("No scenario ran against any target", page)

    def test_indefinite_run_gives_its_reason(self):
        with tempfile.TemporaryDirectory() as root:
            write_target(root, "c", "memory", results([], 2, {"reason": "unreachable", "message": "refused"}))
            page = ct.render([ct.Target(os.path.join(root, "c-memory"))], "now")
            self.assertIn("NOT JUDGED: unreachable: refused", page)

    def test_a_failing_fuzz_pass_fails_the_row_and_its_clause(self):
        res = results([scenario("idem.a", "pass", ["idem.replay.completed"])], 0)
        res["fuzz"] = {"level": "idem", "cases": 32, "seed": 9, "verdict": "failed",
                       "power": "66 bursts of 8", "reason": "the battery's program 67 (FailingBurst, one of 4 of its kind): "
                       "step 0: [idem.effect.at-most-once] no order of 8 overlapping requests <b>"}
        with tempfile.TemporaryDirectory() as root:
            t = ct.Target(write_target(root, "lib", "memory", res))
            self.assertEqual(t.verdict(), "DOES NOT CONFORM")
            self.assertEqual(t.clause_verdicts()["idem.effect.at-most-once"], "FAIL")
            self.assertEqual(t.clause_verdicts()["idem.replay.completed"], "pass")
            page = ct.render([t], "now")
            self.assertIn("**failed**", page)
            self.assertIn("**fuzz pass** (`idem.effect.at-most-once`)", page)
            self.assertIn("--seed 9", page)
            self.assertIn("66 bursts of 8", page)
            self.assertNotIn("<b>", page)
            res["fuzz"]["verdict"] = "passed"
            t = ct.Target(write_target(root, "lib2", "memory", res))
            self.assertEqual(t.verdict(), "CONFORMS")
            self.assertNotIn("idem.effect.at-most-once", t.clause_verdicts())

    def test_every_fuzz_violation_fails_its_clauses_and_says_whether_it_reproduced(self):
        res = results([scenario("idem.a", "pass", ["idem.replay.completed", "idem.lock.held"])], 1)
        res["fuzz"] = {"level": "idem", "cases": 256, "seed": 5, "verdict": "failed", "reason": "first",
                       "violations": [
                           {"clause": "idem.replay.header", "clauses": ["idem.replay.header"], "program": "p1",
                            "message": "a replay <i>unmarked</i>", "scenarioYaml": "id: x", "reproduced": True},
                           {"clause": "idem.lock.held", "clauses": ["idem.lock.held", "idem.effect.at-most-once"],
                            "program": "p2", "message": "ran twice", "scenarioYaml": "id: y", "reproduced": False,
                            "notReproduced": "it passed 3 of 3 replays (timing)"}]}
        with tempfile.TemporaryDirectory() as root:
            t = ct.Target(write_target(root, "lib", "memory", res))
            v = t.clause_verdicts()
            # Every clause of every violation is FAIL, a scenario's pass notwithstanding.
            self.assertEqual(v["idem.replay.header"], "FAIL")
            self.assertEqual(v["idem.lock.held"], "FAIL")
            self.assertEqual(v["idem.effect.at-most-once"], "FAIL")
            self.assertEqual(v["idem.replay.completed"], "pass")
            page = ct.render([t], "now")
            self.assertIn("**fuzz pass** (`idem.replay.header`)", page)
            self.assertIn("replayed against this library before it was written and failed again", page)
            self.assertIn("did NOT fail again when replayed: it passed 3 of 3 replays (timing)", page)
            self.assertNotIn("<i>", page)
            # The first violation's reason alone is not read when the list is there.
            self.assertNotIn("(`first`)", page)

    def test_cli_exit_2_on_an_empty_results_dir(self):
        with tempfile.TemporaryDirectory() as root:
            r = subprocess.run([sys.executable, os.path.join(HERE, "..", "conformance_table.py"), "--results", root,
                                "--out", os.path.join(root, "x.md")], capture_output=True, text=True)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertFalse(os.path.exists(os.path.join(root, "x.md")))


if __name__ == "__main__":
    unittest.main()
