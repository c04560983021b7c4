"""engine.discover.costs: the rates derived from recorded discoveries, the shipped table re-derived
from the recorded runs it names, and the queue's order: heaviest estimate first, the listing units
carrying the routed tool's work, one op's batches by their elements."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from kvdiag.engine.discover import session as discover_session
from kvdiag.engine.discover.batch import Unit
from kvdiag.engine.discover.costs import (SHIPPED_COSTS, CaseCosts, load_costs, merged_rates, order_units,
                                          rates_from_discovery)
from kvdiag.engine.discover.findings import case_elements
from kvdiag.engine.discover.result import from_document
from kvdiag.engine.discover.space import SuiteSpace

DEVICE = Path(__file__).resolve().parents[1] / "fixtures" / "device"
RECORDED = ("h100-session27/whole-discover.json.gz", "h100-session25/whole.json.gz", "h100-session24/whole.json.gz")


def recorded(name: str) -> dict:
    return json.loads(gzip.open(DEVICE / name).read())


def test_a_rate_is_process_seconds_over_listed_cases_spared_ones_included_interrupted_processes_not():
    doc = {"tools": ["racecheck", "synccheck"],
           "processes": [{"tool": "racecheck", "op": "A", "cases": 4, "wall_s": 8.0, "why": None},
                         {"tool": "racecheck", "op": "A", "cases": 4, "wall_s": 500.0,
                          "why": "interrupted (Ctrl-C) before it was judged"},
                         {"tool": "synccheck", "op": "A", "cases": 6, "wall_s": 3.0, "why": None}],
           "cases": [{"tool": "racecheck", "op": "A", "state": "spared"}] * 4
           + [{"tool": "racecheck", "op": "B", "state": "spared"}] * 3}
    assert rates_from_discovery(doc) == {"racecheck": {"A": 1.0, "B": 0.0}, "synccheck": {"A": 0.5}}


def test_merged_rates_take_each_tool_and_op_from_the_first_record_that_has_it():
    first = {"tools": ["racecheck"], "processes": [{"tool": "racecheck", "op": "A", "cases": 1, "wall_s": 2.0}]}
    second = {"tools": ["racecheck"], "processes": [{"tool": "racecheck", "op": "A", "cases": 1, "wall_s": 9.0},
                                                    {"tool": "racecheck", "op": "B", "cases": 2, "wall_s": 1.0}]}
    assert merged_rates([first, second]) == {"racecheck": {"A": 2.0, "B": 0.5}}


def test_the_shipped_table_is_what_the_recorded_runs_it_names_give():
    shipped = json.loads(SHIPPED_COSTS.read_text())
    assert shipped["rates"] == merged_rates([recorded(name) for name in RECORDED])
    assert all(name.split("/")[0].replace("h100-", "") in shipped["source"].replace("{27,25,24}", "27 25 24")
               or "session" in shipped["source"] for name in RECORDED)
    # What session 27 measured: TOP_K's and ARGSORT's racecheck processes are the suite's slowest per case.
    heaviest = sorted(shipped["rates"]["racecheck"], key=shipped["rates"]["racecheck"].get, reverse=True)[:3]
    assert set(heaviest) == {"ARGSORT", "TOP_K", "LIGHTNING_INDEXER"}
    assert shipped["rates"]["racecheck"]["CONV_2D"] == 0.0          # every case spared by routing


def test_a_missing_or_damaged_table_orders_by_case_counts(tmp_path):
    assert load_costs(tmp_path / "none.json") == CaseCosts()
    (tmp_path / "bad.json").write_text('{"rates": {"racecheck": {"A": "fast"}}}')
    assert load_costs(tmp_path / "bad.json") == CaseCosts()
    (tmp_path / "list.json").write_text("[1, 2]")
    assert load_costs(tmp_path / "list.json") == CaseCosts()
    empty = CaseCosts()
    assert empty.rate("racecheck", "A") == 1.0 and empty.unit_seconds("racecheck", "A", 7) == 7.0


def test_an_op_the_table_lacks_costs_its_tools_median():
    costs = CaseCosts(rates={"racecheck": {"A": 1.0, "B": 3.0, "C": 8.0}})
    assert costs.rate("racecheck", "NEW") == 3.0
    assert costs.unit_seconds("synccheck", "A", 2, gated=("racecheck",)) == 2 * (1.0 + 1.0)


def test_a_listing_unit_goes_before_bigger_ones_when_the_racecheck_it_releases_is_heavy():
    costs = CaseCosts(rates={"synccheck": {"TOP_K": 0.2, "FLASH_ATTN_EXT": 0.7},
                             "racecheck": {"TOP_K": 4.4, "FLASH_ATTN_EXT": 1.0}})
    fa = Unit("synccheck", "FLASH_ATTN_EXT", tuple(f"hsk={i}" for i in range(32)))
    top_k = Unit("synccheck", "TOP_K", tuple(f"k={i}" for i in range(30)))
    assert order_units([fa, top_k], costs) == [fa, top_k]                     # alone, 22.4 s against 6 s
    assert order_units([fa, top_k], costs, gated_by={"synccheck": ("racecheck",)}) == [top_k, fa]


def test_session_27s_suite_with_the_shipped_table_starts_top_k_and_argsort_listing_first():
    """The recorded suite's cases, planned as its run was (16 processes, synccheck listing for racecheck):
    there TOP_K's synccheck processes started 660 s in; now the listing units of the ops whose racecheck
    is slowest are among the first to start."""
    doc = recorded(RECORDED[0])
    supported: dict[str, list[str]] = {}
    for case in doc["cases"]:
        if case["tool"] == "synccheck" and case.get("status") != "not supported":
            supported.setdefault(case["op"], []).append(case["params"])
    space = SuiteSpace(supported={op: tuple(cases) for op, cases in supported.items()})
    units = discover_session.plan_units(space, ("synccheck",), all_workers=16, gated_by={"synccheck": ("racecheck",)})
    first = [u.op for u in units[:16]]
    assert {"TOP_K", "ARGSORT", "LIGHTNING_INDEXER"} <= set(first)
    old = sorted(units, key=lambda u: (-len(u.cases), -sum(case_elements(p) for p in u.cases)))   # before
    assert min(i for i, u in enumerate(old) if u.op == "TOP_K") > 0.6 * len(units)      # 293 of 446: in the run, 660 s of 997


def _saved_discovery(store, mode: str, rate_s: float, op: str = "TOP_K") -> str:
    from kvdiag.store.discoveries import DISCOVER_FILE, DISCOVER_FORMAT

    run = store.create("discover")
    doc = {"format": DISCOVER_FORMAT, "tools": ["racecheck"], "program": {"mode": mode},
           "processes": [{"tool": "racecheck", "op": op, "cases": 2, "wall_s": 2 * rate_s, "why": None}], "cases": []}
    (run.path / DISCOVER_FILE).write_text(json.dumps(doc))
    return run.run_id


def test_this_machines_newest_discoveries_of_the_same_mode_come_before_the_shipped_table(tmp_path):
    from kvdiag.engine.discover.costs import LOCAL_DISCOVERIES, discover_costs
    from kvdiag.store.runs import RunStore

    store = RunStore(tmp_path)
    oldest = _saved_discovery(store, "launch", 50.0, op="ARGSORT")      # beyond the newest LOCAL_DISCOVERIES
    newer = [_saved_discovery(store, "launch", 9.0 + i) for i in range(LOCAL_DISCOVERIES - 1)]
    _saved_discovery(store, "test", 99.0)                                 # another mode: the CPU reference ran
    damaged = store.create("discover")
    (damaged.path / "discover.json").write_text("{not json")
    newest = _saved_discovery(store, "launch", 0.25)
    costs = discover_costs(tmp_path, "launch")
    shipped = load_costs()
    assert costs.rate("racecheck", "TOP_K") == 0.25                       # the newest that has it
    assert costs.rate("racecheck", "ARGSORT") == shipped.rate("racecheck", "ARGSORT")
    assert costs.rate("synccheck", "CONV_2D") == shipped.rate("synccheck", "CONV_2D")
    assert costs.source.startswith(f"this machine's discoveries {newest}, {newer[-1]}")
    assert oldest not in costs.source and shipped.source in costs.source


def test_a_home_without_discoveries_orders_by_the_shipped_table(tmp_path):
    from kvdiag.engine.discover.costs import discover_costs

    costs = discover_costs(tmp_path, "launch")
    assert costs == load_costs()
    assert discover_costs(tmp_path, "launch", shipped=tmp_path / "none.json") == CaseCosts(source="no table")


def test_merged_shards_keep_the_order_source_only_when_they_agree():
    from kvdiag.store.discoveries import merged_order

    assert merged_order([{"order": "table"}, {"order": "table"}]) == "table"
    assert merged_order([{"order": "table"}, {"order": "this machine's discoveries X, then table"}]) == ""
    assert merged_order([{"order": {"hostile": 1}}, {}]) == ""


def test_rows_that_do_not_read_as_rows_are_passed_over():
    doc = {"tools": ["racecheck"],
           "processes": ["junk", 3, {"tool": "racecheck"}, {"tool": 5, "op": "A"},
                         {"tool": "racecheck", "op": "A", "cases": "many", "wall_s": 2.0},
                         {"tool": "racecheck", "op": "A", "cases": 2, "wall_s": float("nan")},
                         {"tool": "racecheck", "op": "A", "cases": 2, "wall_s": -1},
                         {"tool": "racecheck", "op": "A", "cases": 2, "wall_s": True},
                         {"tool": "racecheck", "op": "A", "cases": 2, "wall_s": 3.0}],
           "cases": [None, {"tool": "racecheck", "state": "spared"}, {"tool": "racecheck", "op": "A", "state": "spared"}]}
    assert rates_from_discovery(doc) == {"racecheck": {"A": 1.0}}
    for hostile in ({"tools": "racecheck", "processes": {"a": 1}, "cases": "x"}, {}):
        assert rates_from_discovery(hostile) == {}


def test_a_table_with_a_rate_that_is_no_number_of_seconds_is_no_table(tmp_path):
    for value in ('"NaN"', "-1", "true", "[1]", "1e999"):
        (tmp_path / "t.json").write_text('{"rates": {"racecheck": {"A": %s}}}' % value)
        assert load_costs(tmp_path / "t.json") == CaseCosts(), value


def test_a_damaged_discovery_in_the_home_never_stops_a_plan(tmp_path):
    from kvdiag.engine.discover.costs import discover_costs
    from kvdiag.store.discoveries import DISCOVER_FILE, DISCOVER_FORMAT
    from kvdiag.store.runs import RunStore

    store = RunStore(tmp_path)
    for body in ({"format": DISCOVER_FORMAT, "program": {"mode": "launch"}, "tools": ["racecheck"],
                  "processes": {"not": "a list"}, "cases": [1, 2]},
                 {"format": DISCOVER_FORMAT, "program": "launch"}, [1, 2, 3], "text"):
        (store.create("discover").path / DISCOVER_FILE).write_text(json.dumps(body))
    costs = discover_costs(tmp_path, "launch")
    assert costs.rates == load_costs().rates


def test_the_text_and_markdown_say_whose_costs_ordered_the_queue():
    from kvdiag.report.discover_formats import render_markdown, render_text

    result = from_document(recorded("h100-session28/discover-mps-j16.json.gz"))
    line = ("order: each tool's heaviest processes first, by the costs measured in this machine's discoveries "
            "20261207-153316.874742-0001-discover, then recorded whole-suite discoveries of ggml d99724f2")
    assert line in render_text(result) and line in render_markdown(result)
    result.order = ""                                            # an older document names none
    assert "order:" not in render_text(result) and "order:" not in render_markdown(result)
