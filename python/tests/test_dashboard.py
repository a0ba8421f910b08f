"""The Grafana dashboard (dashboards/velvet-rope.json) against the metrics the code exports: no
panel reads a metric that does not exist (or reads it with the wrong suffix), every query
parses as PromQL, and every family the engine and the lease coordinator export is on a panel."""

from __future__ import annotations

import json
import pathlib
import re
from typing import Any

import promql_parser

from velvet_rope import Coordinator, Engine

DASHBOARD = pathlib.Path(__file__).resolve().parents[2] / "dashboards" / "velvet-rope.json"

ROOM = """
[[rooms]]
name = "shop"
total_active_users = 2
new_users_per_minute = 10
"""

LEASES = """
[[resources]]
identifier_glob = "api"
capacity = 10
algorithm = { kind = "fair_share", lease_length = 10, refresh_interval = 1 }
"""

# What each kind of family is read with in PromQL.
SUFFIXES = {"gauge": ("",), "counter": ("_total",), "histogram": ("_bucket", "_count", "_sum")}


def families() -> dict[str, tuple[str, set[str]]]:
    """Every exported family: its type and the suffixes its samples carry."""
    out: dict[str, tuple[str, set[str]]] = {}
    coordinator = Coordinator(LEASES)
    coordinator.request("a", "api", 1.0)
    for name, kind, _help, samples in [*Engine(ROOM).metrics(), *coordinator.metrics()]:
        suffixes = {s[0][len(name):] for s in samples} or set(SUFFIXES[kind])
        out[name] = (kind, suffixes)
    return out


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def targets(d: dict[str, Any]) -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in d["panels"] if p["type"] != "row"
            for t in p["targets"]]


def test_every_query_parses_and_reads_metrics_that_exist() -> None:
    exported = families()
    d = dashboard()
    assert targets(d), "a dashboard without queries"
    for title, expr in targets(d):
        for prefix in ("", "envoy_"):
            query = expr.replace("${prefix}", prefix).replace("$room", "shop")
            promql_parser.parse(query)  # raises on a syntax error
            names = re.findall(r"\b([a-z_]*velvet_rope_[a-z_]+)\b", query)
            assert names, f"panel {title!r}: no velvet-rope metric in {expr}"
            for name in names:
                bare = name.removeprefix(prefix)
                family = next((f for f in exported if bare.startswith(f)
                               and bare[len(f):] in exported[f][1]), None)
                assert family is not None, \
                    f"panel {title!r} reads {bare}, which no family exports with that suffix"
                kind = exported[family][0]
                if kind == "histogram" and bare.endswith("_bucket"):
                    assert "histogram_quantile" in query, f"panel {title!r}: raw buckets"
                if kind == "counter":
                    assert re.search(rf"(?:rate|increase)\({re.escape(name)}\b", query), \
                        f"panel {title!r} shows the counter {name} without rate() or increase()"


def test_every_exported_family_has_a_panel() -> None:
    shown = " ".join(expr for _, expr in targets(dashboard()))
    missing = [f for f in families()
               if not re.search(rf"\b{f}(_total|_bucket|_count|_sum)?\b", shown)]
    assert not missing, f"families on no panel: {missing}"


def test_panels_are_well_formed() -> None:
    d = dashboard()
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    for p in d["panels"]:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24 and g["w"] > 0 and g["h"] > 0, p["title"]
        if p["type"] != "row":
            assert p["title"] and p["description"], f"panel {p['id']} lacks a title or text"
            refs = [t["refId"] for t in p["targets"]]
            assert len(refs) == len(set(refs)), p["title"]
    variables = {v["name"] for v in d["templating"]["list"]}
    assert {"datasource", "prefix", "room"} <= variables
    used = {v for _, e in targets(d) for v in re.findall(r"\$\{?([a-z]+)", e)}
    assert used <= variables, f"queries use undefined variables: {used - variables}"
