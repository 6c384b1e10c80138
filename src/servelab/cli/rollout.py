"""`servelab rollout start|status|pause|resume|abort|promote MODEL`: a running server's rollouts, over its
REST API (``/v2/models/{m}/rollout``, the management key as a bearer token).

``start`` sends a :class:`~servelab.core.routing.RolloutSpec` built from the flags (or ``--spec FILE``,
YAML or JSON, which the flags override); every command prints the status: step, traffic share, each
gate's value against its threshold, the shadow comparison, the per-variant counts and the history.
Exit status 1 when the server refuses (its message is printed), 2 when it cannot be reached.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console
from rich.table import Table

__all__ = ["app", "render_status"]

app = typer.Typer(no_args_is_help=True, help="Release a model version safely: shadow, staged canary with gates, promote.")

Url = Annotated[str, typer.Option("--url", help="The server's HTTP address.")]
Key = Annotated[str | None, typer.Option("--key", envvar="SERVELAB_MANAGEMENT_KEY",
                                         help="Management key (or SERVELAB_MANAGEMENT_KEY).")]
AsJson = Annotated[bool, typer.Option("--json", help="Print the status document as JSON instead of tables.")]
_DEFAULT_URL = "http://127.0.0.1:8000"


def _call(url: str, model: str, key: str | None, action: str = "", body: dict[str, Any] | None = None) -> Any:
    path = f"{url.rstrip('/')}/v2/models/{model}/rollout" + (f"/{action}" if action else "")
    data = json.dumps(body).encode() if body is not None else (b"" if action else None)
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    request = urllib.request.Request(path, data=data, method="POST" if data is not None else "GET", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        text = exc.read().decode(errors="replace")
        try:
            message = json.loads(text).get("error", text)
        except (json.JSONDecodeError, AttributeError):
            message = text
        typer.echo(f"error: {exc.code}: {message}", err=True)
        raise typer.Exit(1) from None
    except (urllib.error.URLError, OSError) as exc:
        typer.echo(f"error: cannot reach {url}: {exc}", err=True)
        raise typer.Exit(2) from None


def _show(doc: dict[str, Any], as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(doc, indent=2))
        return
    console = Console()
    for table in render_status(doc):
        console.print(table)


def _number(value: Any, percent: bool = False) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    return f"{value:.2%}" if percent else f"{value:.4g}"


def render_status(doc: dict[str, Any]) -> list[Table]:
    """The status document as Rich tables: overview, gates, comparison, variants, history."""
    tables = [_overview(doc)]
    rollout = doc.get("rollout")
    if rollout:
        tables.append(_gates(rollout))
    comparison = (rollout or {}).get("comparison") or doc.get("shadow")
    if comparison:
        tables.append(_comparison(comparison))
    if doc.get("variants"):
        variants = Table(title="requests per variant")
        for column in ("variant", "model", "version", "requests", "errors"):
            variants.add_column(column, justify="right" if column in ("requests", "errors") else "left")
        for v in doc["variants"]:
            variants.add_row(v["variant"], v["model"], str(v["version"]), str(v["requests"]), str(v["errors"]))
        tables.append(variants)
    if doc.get("history"):
        history = Table(title="history")
        for column in ("time (UTC)", "event", "detail"):
            history.add_column(column)
        for h in doc["history"][-15:]:
            detail = {k: v for k, v in h.items() if k not in ("at", "event", "gates")}
            history.add_row(time.strftime("%H:%M:%S", time.gmtime(h["at"])), h["event"],
                            ", ".join(f"{k}={v}" for k, v in detail.items()))
        tables.append(history)
    return tables


def _overview(doc: dict[str, Any]) -> Table:
    table = Table(title=f"model {doc['model']}", show_header=False)
    table.add_column("what")
    table.add_column("value")
    table.add_row("default version", str(doc["default_version"]))
    table.add_row("labels", ", ".join(f"{k}={v}" for k, v in sorted(doc["labels"].items())) or "-")
    if doc.get("split"):
        total = sum(a["weight"] for a in doc["split"]) or 1.0
        table.add_row("split", ", ".join(f"{a['variant']} {a['weight'] / total:.0%}" for a in doc["split"]))
    rollout = doc.get("rollout")
    if rollout:
        steps = rollout["steps"]
        table.add_row("rollout", f"v{rollout['stable']} -> v{rollout['candidate']}: {rollout['status']}")
        table.add_row("step", f"{rollout['step'] + 1} of {len(steps)} ({', '.join(f'{s:g}%' for s in steps)})"
                      + (" - shadow" if rollout["shadow_step"] else ""))
        table.add_row("traffic share", f"candidate {rollout['percent']:g}%, stable {100 - rollout['percent']:g}%")
        if rollout.get("step_elapsed_s") is not None:
            table.add_row("time at step", f"{rollout['step_elapsed_s']:.0f} s (at least {rollout['spec']['min_dwell_s']:g})")
        if rollout["reason"]:
            table.add_row("reason", rollout["reason"])
    return table


def _gates(rollout: dict[str, Any]) -> Table:
    table = Table(title="gates (this step)")
    for column in ("gate", "value", "threshold", "state", "detail"):
        table.add_column(column)
    for g in rollout["gates"]:
        rate = g["name"] == "error_rate" or g["name"] == "top1_agreement"
        state = {True: "[green]pass[/green]", False: "[red]FAIL[/red]", None: "waiting"}[g["passed"]]
        table.add_row(g["name"], _number(g["value"], rate), _number(g["threshold"], rate), state, g["detail"])
    return table


def _comparison(c: dict[str, Any]) -> Table:
    table = Table(title=f"comparison {c['reference']} vs {c['other']}")
    for column in ("compared", "failed", "shed", "|diff| p50", "p99", "max", "top-1", *[f"{k} P99 ms" for k in c["latency_ms"]]):
        table.add_column(column, justify="right")
    diff = c["abs_diff"]
    table.add_row(str(c["compared"]), str(c["failed"]), str(c["shed"]), _number(diff.get("p50")),
                  _number(diff.get("p99")), _number(diff.get("max")), _number(c["top1_agreement"], True),
                  *[_number(v["p99"]) for v in c["latency_ms"].values()])
    return table


def _spec(spec_file: Path | None, flags: dict[str, Any], gates: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if spec_file is not None:
        try:
            loaded = yaml.safe_load(spec_file.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            typer.echo(f"error: --spec {spec_file}: {exc}", err=True)
            raise typer.Exit(2) from None
        if not isinstance(loaded, dict):
            typer.echo(f"error: --spec {spec_file} must hold a mapping", err=True)
            raise typer.Exit(2)
        spec = loaded
    spec.update({k: v for k, v in flags.items() if v is not None})
    given = {k: v for k, v in gates.items() if v is not None}
    if given:
        spec["gates"] = {**spec.get("gates", {}), **given}
    return spec


@app.command("start")
def start(
    model: Annotated[str, typer.Argument(help="The model to release a new version of.")],
    candidate: Annotated[str | None, typer.Option("--candidate", help="Candidate version or label.")] = None,
    stable: Annotated[str | None, typer.Option("--stable", help="Stable version or label [the default now].")] = None,
    steps: Annotated[str | None, typer.Option("--steps", help="Candidate percent per step [5,20,100].")] = None,
    shadow: Annotated[bool, typer.Option("--shadow", help="Begin with a shadow step (0% live, copies compared).")] = False,
    manual: Annotated[bool, typer.Option("--manual", help="Each step waits for `promote` (gates still roll back).")] = False,
    min_dwell_s: Annotated[float | None, typer.Option("--min-dwell-s", help="Least seconds per step [60].")] = None,
    min_requests: Annotated[int | None, typer.Option("--min-requests", help="Least candidate requests per step [100].")] = None,
    shadow_sample: Annotated[float | None, typer.Option("--shadow-sample", help="Share copied in the shadow step [1].")] = None,
    agreement_sample: Annotated[float | None, typer.Option("--agreement-sample", help="Share of canary requests compared with stable [0.1].")] = None,
    sticky_header: Annotated[str | None, typer.Option("--sticky-header", help="Header whose value keeps a user on one side.")] = None,
    max_error_rate_increase: Annotated[float | None, typer.Option("--max-error-rate-increase", help="Gate [0.01].")] = None,
    p99_max_increase: Annotated[float | None, typer.Option("--p99-max-increase", help="Gate: P99 at most stable x (1 + this) [0.05].")] = None,
    p99_slack_ms: Annotated[float | None, typer.Option("--p99-slack-ms", help="Gate: absolute P99 slack [0].")] = None,
    max_abs_diff: Annotated[float | None, typer.Option("--max-abs-diff", help="Gate: output agreement epsilon [1e-5].")] = None,
    min_top1_agreement: Annotated[float | None, typer.Option("--min-top1-agreement", help="Gate: top-1 agreement instead of epsilon.")] = None,
    min_samples: Annotated[int | None, typer.Option("--min-samples", help="Samples a gate needs to decide [50].")] = None,
    spec_file: Annotated[Path | None, typer.Option("--spec", help="RolloutSpec file (YAML or JSON); flags override it.")] = None,
    url: Url = _DEFAULT_URL,
    key: Key = None,
    as_json: AsJson = False,
) -> None:
    """Start a rollout of MODEL's candidate version."""
    flags = {
        "candidate": candidate, "stable": stable, "shadow": shadow or None, "auto": False if manual else None,
        "min_dwell_s": min_dwell_s, "min_requests": min_requests, "shadow_sample": shadow_sample,
        "agreement_sample": agreement_sample, "sticky": {"header": sticky_header} if sticky_header else None,
        "steps": [float(s) for s in steps.split(",")] if steps else None,
    }
    gates = {"max_error_rate_increase": max_error_rate_increase, "p99_max_increase": p99_max_increase,
             "p99_slack_ms": p99_slack_ms, "max_abs_diff": max_abs_diff, "min_top1_agreement": min_top1_agreement,
             "min_samples": min_samples}
    spec = _spec(spec_file, flags, gates)
    if "candidate" not in spec:
        typer.echo("error: give --candidate (or a --spec file naming it)", err=True)
        raise typer.Exit(2)
    _show(_call(url, model, key, body=spec), as_json)


@app.command("status")
def status(model: Annotated[str, typer.Argument(help="The model.")], url: Url = _DEFAULT_URL, key: Key = None,
           as_json: AsJson = False) -> None:
    """Step, traffic share, each gate against its threshold, the shadow comparison and the history."""
    _show(_call(url, model, key), as_json)


def _action(name: str, doc: str) -> None:
    def command(model: Annotated[str, typer.Argument(help="The model.")], url: Url = _DEFAULT_URL, key: Key = None,
                as_json: AsJson = False) -> None:
        _show(_call(url, model, key, action=name), as_json)

    command.__doc__ = doc
    app.command(name)(command)


_action("pause", "Stop advancing (gates still roll back a failing candidate).")
_action("resume", "Advance again when the gates pass.")
_action("abort", "Send every request back to stable now.")
_action("promote", "Go to the next step now; at the last step, make the candidate stable.")
